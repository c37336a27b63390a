// The collector's model of a run: per process and per device, the allocation timeline rebuilt
// from events, with the exact peak and what was live at it, OOMs, leaks and counts by API.
//
// Memory grows with the live allocations and the distinct kernel names, never with the number
// of events: the live set at the peak is found in one pass (allocations freed after the current
// peak are kept aside until a higher peak supersedes them), and the timeline is downsampled as
// it is built (buckets double in width when full; each keeps its maximum, so the peak survives).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/allocation.h"
#include "collector/model/allocator_view.h"
#include "common/format.h"

namespace vramtrace::collector {

// PyTorch's memory as the start-up hook described it (torch_trace.h), and indexed
// (torch_memory.h): a process's model holds both, made once its side channel is merged.
struct TorchContext;
class TorchMemory;

struct ApiStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  uint64_t frees = 0;
  uint64_t failed = 0;
};

// Live bytes over time, at most `max_points` buckets of equal width. Each bucket keeps its
// highest and lowest figure with their moments (the first to reach them), so that a chart of
// the buckets' extremes, in time order, shows every rise and fall wider than a bucket, and the
// exact peak at its moment.
class Timeline {
 public:
  struct Point {
    uint64_t time_ns;  // start of the bucket
    uint64_t max_bytes;
    uint64_t last_bytes;
    uint64_t min_bytes;
    uint64_t max_ns, min_ns;  // when max_bytes and min_bytes were first reached
    // The bucket takes a figure at `t`, or a later bucket's figures (merged when coarsening).
    void observe(uint64_t bytes, uint64_t t) {
      extremes(bytes, t, bytes, t);
      last_bytes = bytes;
    }
    void merge(const Point& later) {
      extremes(later.max_bytes, later.max_ns, later.min_bytes, later.min_ns);
      last_bytes = later.last_bytes;
    }

   private:
    void extremes(uint64_t hi, uint64_t hi_ns, uint64_t lo, uint64_t lo_ns) {
      if (hi > max_bytes) {
        max_bytes = hi;
        max_ns = hi_ns;
      }
      if (lo < min_bytes) {
        min_bytes = lo;
        min_ns = lo_ns;
      }
    }
  };
  explicit Timeline(size_t max_points = 2048) : max_points_(max_points) {}
  void add(uint64_t time_ns, uint64_t bytes) {
    // Most events fall in the last bucket: inline, and no division for them.
    if (!points_.empty()) {
      Point& p = points_.back();
      if (time_ns >= p.time_ns && time_ns - p.time_ns < width_) {
        p.observe(bytes, time_ns);
        return;
      }
    }
    add_bucket(time_ns, bytes);
  }
  const std::vector<Point>& points() const { return points_; }
  uint64_t bucket_ns() const { return width_; }

 private:
  void add_bucket(uint64_t time_ns, uint64_t bytes);  // the event is past the last bucket
  void coarsen();
  size_t max_points_;
  uint64_t origin_ = 0;
  uint64_t width_ = 1000;  // 1 us to start with
  bool started_ = false;
  std::vector<Point> points_;
};

// Live-bytes accounting with the exact peak and, optionally, the set live at it.
class PeakTracker {
 public:
  void add(const Allocation& a, uint64_t now);
  void remove(const Allocation& a, uint64_t now);
  uint64_t live_bytes() const { return live_; }
  uint64_t peak_bytes() const { return peak_; }
  uint64_t peak_time() const { return peak_time_; }
  uint64_t peak_seq() const { return peak_seq_; }
  // The allocations that were live at the peak: call once live allocations are known.
  std::vector<Allocation> live_at_peak(const std::vector<const Allocation*>& still_live) const;
  Timeline timeline;

 private:
  uint64_t live_ = 0, peak_ = 0, peak_time_ = 0, peak_seq_ = 0;
  std::vector<Allocation> freed_after_peak_;
};

struct OomEvent {
  uint32_t device = 0;
  uint64_t pid = 0;
  uint64_t requested_bytes = 0;
  uint64_t time_ns = 0;
  format::Api api = format::Api::Unknown;
  uint64_t result = 0;
  uint32_t thread = 0;
  uint64_t live_bytes = 0;  // this process's live device bytes on that device then
  std::optional<uint64_t> free_bytes, total_bytes;  // the driver's cuMemGetInfo then
  std::string last_kernel;
  uint32_t stack = 0, py_stack = 0;  // the failed request's own stack
  std::vector<Allocation> live;      // the live set then, largest first (capped)
  // A sub-allocator's view of the moment (PyTorch's caching allocator, a vramtrace.h pool):
  // the request as the pool saw it and its segments' free blocks then.
  bool allocator = false;        // reported by the allocator (a driver failure may have come first)
  uint64_t driver_attempts = 1;  // failed driver calls of this OOM (0: the allocator's alone)
  bool recovered = false;        // the allocator freed its cache and its retry worked
  // The OOM that ended the job: the allocator's last OOM before the OutOfMemoryError that
  // reached the top of the Python program, or a native process's last OOM when it then died.
  // The others were survived (a library's workspace attempt that fell back, a caught error).
  bool fatal = false;
  std::string pool;
  uint64_t allocator_request = 0;
  std::optional<FragmentationState> fragmentation;
  // Everything live then, allocations and blocks, for growth by iteration (first OOMs only).
  std::vector<Allocation> survivors;
};

// Launches per kernel name id. The library numbers its names from 1, so the ids index a
// vector; an id from kDenseIds up (a program with very many names, or a corrupt trace) is
// counted in a map, so that one record cannot make a device allocate megabytes.
class LaunchCounts {
 public:
  void add(uint32_t id) {
    if (id < dense_.size()) [[likely]] {
      if (dense_[id]++ == 0) ++distinct_;
    } else {
      add_new(id);
    }
  }
  size_t distinct() const { return distinct_; }  // ids launched at least once
  uint64_t of(uint32_t id) const;
  std::vector<std::pair<uint32_t, uint64_t>> all() const;  // (id, launches), ids launched

 private:
  static constexpr uint32_t kDenseIds = 4096;
  void add_new(uint32_t id);
  std::vector<uint64_t> dense_;
  std::unordered_map<uint32_t, uint64_t> sparse_;
  size_t distinct_ = 0;
};

struct DeviceModel {
  uint32_t index = 0;
  std::string name;
  std::string uuid;
  uint64_t total_bytes = 0;
  PeakTracker memory;
  std::array<ApiStats, static_cast<size_t>(format::Api::kCount)> apis{};
  uint64_t allocations = 0, frees = 0, unmatched_frees = 0, replaced_without_free = 0;
  uint64_t launches = 0;
  LaunchCounts launches_by_kernel;
  uint32_t last_kernel = 0;
  uint32_t kernel_at_peak = 0;
  std::vector<Allocation> live_at_peak;  // filled by finish()

  // Stream-ordered pools: what the driver reserved for them (PoolUsage records) against what
  // is allocated from them. The footprint counts a pool at its reserved size when known.
  struct Pool {
    uint64_t reserved = 0, used = 0, peak_reserved = 0;
  };
  std::map<uint64_t, Pool> pools;
  uint64_t async_live = 0;
  uint64_t pool_reserved = 0;
  uint64_t footprint_peak = 0, footprint_peak_time = 0;
  uint64_t footprint() const {
    uint64_t other = memory.live_bytes() - std::min(memory.live_bytes(), async_live);
    return other + std::max(pool_reserved, async_live);
  }
  // The footprint over time (drawn beside the in-use timeline when the two differ) and the
  // kernel launches over time (their count per bucket: the rhythm of the run).
  Timeline footprint_timeline;
  Timeline launch_timeline;

  // The sub-allocators' pools on this device, summed: now, at the in-use peak (taken within
  // 1 ms after it: the allocator's records of the segment that made the peak come just after
  // the driver's), when the most reserved memory was free, and over time.
  bool has_allocator_view = false;
  FragmentationState frag;
  std::optional<FragmentationState> frag_at_peak;
  FragmentationState frag_most_free;
  uint64_t allocator_peak_in_use = 0, allocator_peak_time = 0;
  Timeline frag_free_timeline;          // reserved but free bytes
  Timeline frag_largest_timeline;       // largest free block
  std::vector<uint32_t> phase_at_peak;  // NVTX ranges open on the thread that made the peak
  // The pools' blocks: their own in-use peak and the blocks live at it (filled by finish()),
  // where memory kept across iterations is seen even when the program frees it at the end.
  PeakTracker blocks;
  std::vector<Allocation> blocks_at_peak;
  // Every driver allocation and free of a process with PyTorch's allocator trace, in order
  // (collector/predict/whatif.h takes what lay outside PyTorch's segments from it as fixed
  // background).
  struct DriverChange {
    uint64_t time_ns = 0, id = 0, bytes = 0;
    format::Api api = format::Api::Unknown;
    bool added = false;
  };
  std::vector<DriverChange> driver_log;
  void update_footprint(uint64_t now) {
    uint64_t f = footprint();
    footprint_timeline.add(now, f);
    if (f > footprint_peak) {
      footprint_peak = f;
      footprint_peak_time = now;
    }
  }
};

struct VmmHandle {
  Allocation alloc;
  bool released = false;
  uint32_t mappings = 0;
};

// A loaded module of a traced process, as its Module records described it.
struct ModuleInfo {
  std::string path;
  std::string build_id;  // raw bytes (empty when the module had none)
  uint64_t bias = 0, start = 0, end = 0;
};

// A node of a process's trace tree: a native return address (with the module that held it when
// the node was written) or a Python frame.
struct StackNode {
  uint32_t parent = 0;
  bool python = false;
  uint64_t ip = 0;
  int64_t module = -1;          // index into ProcessModel::modules; -1: in no known module
  uint32_t code = 0, line = 0;  // Python frames
};

// A sub-allocator's pool (vramtrace.h, or PyTorch's caching allocator on one device).
struct UserPool {
  std::string name;
  uint32_t device = 0;
  bool torch = false;
  PoolView view;
  uint64_t peak_in_use = 0, peak_reserved = 0, ooms = 0;
};

// A completed NVTX range.
struct Phase {
  uint32_t name = 0;  // String id
  uint32_t thread = 0, depth = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct ProcessModel {
  uint64_t pid = 0, ppid = 0;
  std::string host, exe, trace_path;
  std::vector<std::string> cmdline;
  std::vector<std::pair<std::string, std::string>> ranks;
  uint64_t start_realtime_ns = 0, start_ns = 0, end_ns = 0;
  // Its last record before its exit: the last CUDA work of its own or of PyTorch's allocator
  // (what it did between then and end_ns used no device memory that any record shows).
  uint64_t work_end_ns = 0;
  bool has_process_record = false;
  bool clean_exit = false;  // reached exit() and flushed (a ProcessExit record)
  // The status it gave exit() (an ExitStatus record, 0-255; the library writes only a non-zero
  // one); none: 0 when it exited cleanly, otherwise not known (a trace from before the record,
  // a process killed by a signal or ended by _exit()).
  std::optional<int> exit_status;
  std::string problem;  // why the stream ended early, if it did
  uint64_t events = 0, dropped_events = 0;
  std::vector<std::string> notices;
  std::string cupti_library;  // the CUPTI file the process loaded; empty: not recorded
  // Why the library gave up on this process (its first Notice record): empty when profiled. A
  // process that was not profiled used device memory that no record shows.
  std::string not_profiled;
  bool profiled() const { return not_profiled.empty(); }
  // Whether kernel launches were recorded (a Settings record says not: VRAMTRACE_LAUNCHES=off).
  // When not, launch counts, the kernel at the peak and the launch rhythm are unknown, not 0.
  bool launches_recorded = true;
  // When launches stopped being recorded in the running process (a LaunchesStopped record; 0:
  // never), and why (format::StopReason): from then on they are unknown, as with launches off.
  uint64_t launches_stopped_ns = 0;
  uint64_t launches_stop_reason = 0;
  std::map<uint32_t, DeviceModel> devices;
  PeakTracker pinned_host;
  std::array<ApiStats, static_cast<size_t>(format::Api::kCount)> host_apis{};
  std::vector<OomEvent> ooms;
  std::map<uint64_t, uint64_t> failures_by_result;  // non-OOM failed allocations
  std::unordered_map<uint32_t, std::string> kernel_names;

  // Stacks: every module seen (the current map indexes it by start address), the trace tree,
  // Python code locations (file, function).
  std::vector<ModuleInfo> modules;
  std::unordered_map<uint32_t, StackNode> stack_nodes;
  std::unordered_map<uint32_t, std::pair<std::string, std::string>> py_codes;

  // Live allocations, keyed by (space, id).
  std::unordered_map<uint64_t, Allocation> live;  // device pointers and array handles
  std::unordered_map<uint64_t, Allocation> live_host;
  std::unordered_map<uint64_t, VmmHandle> vmm_handles;

  // Sub-allocators, phases and iterations.
  std::map<uint64_t, UserPool> user_pools;
  bool torch_trace = false;  // PyTorch's allocator trace was merged in
  // What PyTorch's memory is (the start-up hook's context): categories, modules, phases.
  std::shared_ptr<const TorchMemory> torch_memory;
  // PyTorch's allocator trace itself (the blocks, segments and OOMs in order), also when the hook
  // saw no context to classify by (torch_memory null); the same object as torch_memory's context.
  std::shared_ptr<const TorchContext> torch_context;
  std::string torch_trace_problem;  // why it is incomplete, if it is
  std::vector<Phase> phases;        // the first kMaxPhases completed ranges
  uint64_t phases_total = 0;
  struct RangeStats {
    uint64_t count = 0, total_ns = 0;
  };
  std::map<uint32_t, RangeStats> range_stats;  // by name id
  // Iteration starts (finish()), and what they were found from.
  std::vector<uint64_t> iterations;
  std::string iteration_source;   // "vramtrace_step()", "NVTX range 'NAME'", "kernel"
  uint32_t iteration_kernel = 0;  // the kernel that marks them (source "kernel")
  uint64_t iteration_period = 0;  // in launches

  const std::string& kernel_name(uint32_t id) const;
  // The iteration an event at `t` belongs to: -1 before the first.
  int64_t iteration_of(uint64_t t) const {
    auto it = std::upper_bound(iterations.begin(), iterations.end(), t);
    return static_cast<int64_t>(it - iterations.begin()) - 1;
  }
};

// Whether a driver allocation is a segment that one of the process's sub-allocator pools
// carves blocks from (PyTorch's expandable segments: its VMM handles), i.e. the pool's memory.
bool held_by_pool(const ProcessModel& p, const Allocation& a);

// A device as the whole run saw it: the sum of every process's use of it (same host).
struct RunDevice {
  std::string host;
  uint32_t index = 0;
  std::string name, uuid;
  uint64_t total_bytes = 0;
  uint64_t live_bytes = 0, peak_bytes = 0, peak_time_ns = 0;
  // The first CUDA work on it: a context created, else an allocation (0: none recorded).
  uint64_t first_ns = 0;
  std::map<uint64_t, uint64_t> live_by_pid, peak_by_pid;
  Timeline timeline;
  // What was live at the device's peak, every process's: found as a process's own live set at
  // its peak is (PeakTracker), with the run-wide order of events. Each Allocation names its
  // process. Filled by model_of(), largest first.
  uint64_t peak_seq = 0;
  std::vector<Allocation> freed_after_peak;
  std::vector<Allocation> live_at_peak;
};

struct Run {
  std::vector<ProcessModel> processes;
  std::vector<RunDevice> devices;
  uint64_t origin_ns = 0;  // earliest process start: report times count from here
  std::vector<std::string> problems;
  bool stand_in = false;
  // Whether any trace gave anything: a process record or an event. Traces corrupt from their
  // first frame, or cut before their first write, give none, and a report of them would say "no
  // device memory was used": a false answer, refused by every command that reads traces.
  bool anything_read() const {
    for (const auto& p : processes)
      if (p.has_process_record || p.events) return true;
    return false;
  }
};

// The model of a run (analysis_of() in collector/analysis/analysis.h makes its analysis): from
// one or more trace files (each a process), merged in time order, with the start-up hook's side
// channels (vramtrace.<pid>.torch, .jax: collector/ingest/torch_trace.h) merged into the process
// they belong to. Throws TraceError when a file is not a readable trace; a truncated trace is
// kept as partial.
Run model_of(const std::vector<std::string>& paths);

// Same, from a run's files as open_run() opened them: the traces that could not be opened are
// among the run's problems (after those of the files read).
Run model_of(RunFiles files);

// Same, from already-open readers (tests), with the side channels' paths.
Run model_of(std::vector<std::unique_ptr<TraceReader>> readers,
             const std::vector<std::string>& torch_paths = {});

}  // namespace vramtrace::collector

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
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/trace_reader.h"
#include "common/format.h"

namespace vramtrace::collector {

struct Allocation {
  uint64_t id = 0;  // device address, array handle or VMM handle
  uint8_t space = 0;  // which id space `id` lives in (see model.cpp)
  format::Api api = format::Api::Unknown;
  uint32_t device = 0;
  uint64_t bytes = 0;
  uint64_t time_ns = 0;
  uint64_t seq = 0;
  uint64_t stream = 0;
  uint32_t thread = 0;
  uint32_t last_kernel = 0;  // name id of the kernel launched last before it on its device
  uint32_t stack = 0;        // leaf of its native stack in the process's trace tree (0: none)
  uint32_t py_stack = 0;     // leaf of its Python stack (0: none)
};

struct ApiStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  uint64_t frees = 0;
  uint64_t failed = 0;
};

// Live bytes over time, at most `max_points` buckets of equal width.
class Timeline {
 public:
  struct Point {
    uint64_t time_ns;  // start of the bucket
    uint64_t max_bytes;
    uint64_t last_bytes;
  };
  explicit Timeline(size_t max_points = 2048) : max_points_(max_points) {}
  void add(uint64_t time_ns, uint64_t bytes);
  const std::vector<Point>& points() const { return points_; }
  uint64_t bucket_ns() const { return width_; }

 private:
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
  std::vector<Allocation> live;  // the live set then, largest first (capped)
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
  std::unordered_map<uint32_t, uint64_t> launches_by_kernel;
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
  uint64_t launches_in_bucket = 0;
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
  int64_t module = -1;  // index into ProcessModel::modules; -1: in no known module
  uint32_t code = 0, line = 0;  // Python frames
};

struct ProcessModel {
  uint64_t pid = 0, ppid = 0;
  std::string host, exe, trace_path;
  std::vector<std::string> cmdline;
  std::vector<std::pair<std::string, std::string>> ranks;
  uint64_t start_realtime_ns = 0, start_ns = 0, end_ns = 0;
  bool has_process_record = false;
  bool clean_exit = false;  // reached exit() and flushed (a ProcessExit record)
  std::string problem;      // why the stream ended early, if it did
  uint64_t events = 0, dropped_events = 0;
  std::vector<std::string> notices;
  std::map<uint32_t, DeviceModel> devices;
  PeakTracker pinned_host;
  std::array<ApiStats, static_cast<size_t>(format::Api::kCount)> host_apis{};
  std::vector<OomEvent> ooms;
  std::map<uint64_t, uint64_t> failures_by_result;  // non-OOM failed allocations
  std::unordered_map<uint32_t, std::string> kernel_names;

  // Stacks: every module seen (the current map indexes it by start address), the trace tree,
  // Python code locations (file, function).
  std::vector<ModuleInfo> modules;
  std::map<uint64_t, size_t> module_map;
  uint64_t module_generation = UINT64_MAX;
  std::unordered_map<uint32_t, StackNode> stack_nodes;
  std::unordered_map<uint32_t, std::pair<std::string, std::string>> py_codes;

  // Live allocations, keyed by (space, id).
  std::unordered_map<uint64_t, Allocation> live;  // device pointers and array handles
  std::unordered_map<uint64_t, Allocation> live_host;
  std::unordered_map<uint64_t, VmmHandle> vmm_handles;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> vmm_mappings;  // va -> (bytes, handle)

  const std::string& kernel_name(uint32_t id) const;
};

// A device as the whole run saw it: the sum of every process's use of it (same host).
struct RunDevice {
  std::string host;
  uint32_t index = 0;
  std::string name, uuid;
  uint64_t total_bytes = 0;
  uint64_t live_bytes = 0, peak_bytes = 0, peak_time_ns = 0;
  std::map<uint64_t, uint64_t> live_by_pid, peak_by_pid;
  Timeline timeline;
};

struct Run {
  std::vector<ProcessModel> processes;
  std::vector<RunDevice> devices;
  uint64_t origin_ns = 0;  // earliest process start: report times count from here
  std::vector<std::string> problems;
  bool stand_in = false;
};

// Builds the model from one or more trace files (each a process), merged in time order.
// Throws TraceError when a file is not a readable trace; a truncated trace is kept as partial.
Run analyze(const std::vector<std::string>& trace_paths);

// Same, from already-open readers (tests).
Run analyze(std::vector<std::unique_ptr<TraceReader>> readers);

}  // namespace vramtrace::collector

// The builder of one process's model: applies its records, one at a time and in time order, to
// its ProcessModel (the results) and to the run-wide devices, keeping what it needs only while
// it reads (open ranges, the launch rhythm, mappings, module lookups) apart from the results.
// collector/model/merge.h feeds the builders of a run in time order: collector/model/model_of.cpp
// for traces read to their end, collector/model/live_model.h while the run goes on.
//
// The handlers are grouped by concern: build_process.cpp (the process, its strings, stacks and
// modules), build_memory.cpp (the dispatch, driver allocations, kernel launches and their
// rhythm, VMM, stream-ordered pools and the run-wide devices: the hot path),
// build_allocator.cpp (sub-allocators' pools, segments and blocks), build_ooms.cpp (failed
// allocations and which OOM ended the job), build_iterations.cpp (NVTX ranges, steps and the
// iterations found from them and the launch rhythm).
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/model/model.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

// A CUDA API's slot in the per-API counts (an id from a newer library counts as Unknown).
inline size_t api_slot(format::Api api) {
  auto i = static_cast<size_t>(api);
  return i < static_cast<size_t>(format::Api::kCount) ? i : 0;
}

class Builder {
 public:
  // Only the first OOMs of a process keep their whole live set (for growth), and only the
  // first kOomsWithLiveSet their largest allocations: a trace of many OOMs (a retry loop, a
  // corrupt or crafted file) must not cost OOMs x live allocations (250 KB of trace took 2 GiB).
  static constexpr size_t kOomsWithSurvivors = 4;
  static constexpr size_t kOomsWithLiveSet = 64;

  // What one process's records can make the builder hold, whatever the trace (a crafted or
  // broken one): 136 KB of zstd frames of RangePush records took 2 GiB and then the process.
  // Allocations live at once: the driver's (device, pinned host, VMM handles), or one pool's
  // blocks. Past it the process is read no further (limit() says so): what follows would be
  // figured without the allocations not kept.
  static constexpr size_t kMaxLive = size_t{1} << 21;
  // NVTX ranges open on one thread (deeper ones are counted, so that their pops match, but not
  // kept), threads with ranges open, and distinct range names timed.
  static constexpr size_t kMaxRangeDepth = 1024;
  static constexpr size_t kMaxRangeThreads = 4096;
  static constexpr size_t kMaxRangeNames = 65536;

  using DeviceIndex = std::map<std::pair<std::string, uint32_t>, size_t>;
  // `seq`: the run's event counter, shared by the builders of its processes, so that the order
  // of allocations is known across processes (what was live at a device's run-wide peak).
  Builder(Run& run, ProcessModel& p, DeviceIndex& where, uint64_t& seq)
      : run_(&run),
        p_(&p),
        where_(&where),
        seq_(&seq),
        process_(static_cast<uint32_t>(&p - run.processes.data())) {}

  // A copy of `other` that writes into `run`, a copy of other's run (`p`: this process's model
  // in it, `where` and `seq` its copies): a report of a moment finishes copies, and the builders
  // that go on reading stay as they were (collector/model/live_model.h).
  Builder(const Builder& other, Run& run, ProcessModel& p, DeviceIndex& where, uint64_t& seq)
      : Builder(other) {
    run_ = &run;
    p_ = &p;
    where_ = &where;
    seq_ = &seq;
    last_device_ = nullptr;  // pointed into the other run's map
    pend_ = &pending_[other.pend_ - other.pending_];
  }

  // `secondary`: the record comes from PyTorch's trace of this process, not from its own trace;
  // `stream`: then a block's CUDA stream (PyTorch's trace has it, the UserBlock record has not).
  void apply(const format::Record& r, bool secondary = false, uint64_t stream = 0);

  // After the last record: iterations, the OOM that ended the job, the live sets at the peaks.
  void finish();

  // The first bound above that the process's records reached (empty: none): the process's
  // report is incomplete, and this says how.
  const std::string& limit() const { return limit_; }

 private:
  // Most events name the device of the event before: remember it (std::map nodes are stable).
  // The check is inline and the lookup is not: with the lookup in it, GCC stopped inlining
  // device() into apply(), a call per use on the hot path.
  DeviceModel& device(uint32_t index) {
    if (last_device_ && last_device_->index == index) [[likely]]
      return *last_device_;
    return find_device(index);
  }
  [[gnu::noinline]] DeviceModel& find_device(uint32_t index);
  RunDevice& run_dev(uint32_t index);

  // build_process.cpp
  void on_process(const format::rec::Process& r);
  void on_context(const format::rec::ContextCreate& r, uint64_t t);
  void on_mem_info(const format::rec::MemInfo& r);
  void on_string(const format::rec::String& r);
  void on_stack_node(const format::rec::StackNode& r);
  void on_py_stack_node(const format::rec::PyStackNode& r);
  void on_py_code(const format::rec::PyCode& r);
  void on_alloc_stack(const format::rec::AllocStack& r);
  void on_module(const format::rec::Module& r);
  void on_dropped(const format::rec::Dropped& r) { p_->dropped_events += r.count; }
  void on_process_exit() { p_->clean_exit = true; }
  void on_exit_status(const format::rec::ExitStatus& r);
  void on_settings(const format::rec::Settings& r) { p_->launches_recorded = r.launches != 0; }
  void on_notice(const format::rec::Notice& r);

  // build_memory.cpp
  void on_alloc(const format::rec::Alloc& r, uint64_t t);
  void on_free(const format::rec::Free& r, uint64_t t);
  void on_vmm_create(const format::rec::VmmCreate& r, uint64_t t);
  void on_vmm_release(const format::rec::VmmRelease& r, uint64_t t);
  void on_vmm_map(const format::rec::VmmMap& r);
  void on_vmm_unmap(const format::rec::VmmUnmap& r, uint64_t t);
  void on_pool_usage(const format::rec::PoolUsage& r, uint64_t t);
  Allocation make(format::Api api, uint32_t device_index, uint64_t id, uint64_t bytes, uint64_t t,
                  uint64_t stream, uint32_t thread);
  void add_device(const Allocation& a, uint64_t now);
  void remove_device(const Allocation& a, uint64_t now);
  void run_delta(const Allocation& a, uint64_t now, bool added);

  // build_allocator.cpp
  void on_user_pool(const format::rec::UserPool& r);
  void on_user_segment(const format::rec::UserSegment& r, uint64_t t);
  void on_user_block(const format::rec::UserBlock& r, uint64_t t, uint64_t stream);
  void on_allocator_oom(const format::rec::UserOom& r, uint64_t t);
  UserPool* user_pool(uint64_t id);
  FragmentationState allocator_state(uint32_t device_index, uint64_t now) const;
  void on_allocator_change(uint32_t device_index, uint64_t now, bool grew);
  std::vector<Allocation> survivors(uint32_t device_index) const;
  bool held_by_pool(const Allocation& a) const { return collector::held_by_pool(*p_, a); }

  // build_ooms.cpp
  void on_failed(const format::rec::AllocFailed& r, uint64_t t);
  void fill_live_set(OomEvent& o);
  void find_fatal_oom();

  // build_iterations.cpp
  void on_launch(const format::rec::Launch& r, uint64_t t);
  void on_launches_stopped(const format::rec::LaunchesStopped& r, uint64_t t);
  void on_range_push(const format::rec::RangePush& r, uint64_t t);
  void on_range_pop(const format::rec::RangePop& r, uint64_t t);
  void on_step(uint64_t t);
  void on_rhythm(uint32_t id, uint64_t now);
  void find_iterations();
  void reach_limit(std::string what) {
    if (limit_.empty()) limit_ = std::move(what);
  }
  [[gnu::noinline]] void stop_at_live_limit(const char* what, uint64_t t);

  Run* run_;
  ProcessModel* p_;
  DeviceIndex* where_;  // run_->devices by (host, index), shared by the builders of a run
  uint64_t* seq_;
  uint32_t process_ = 0;  // index of p_ in run_->processes
  DeviceModel* last_device_ = nullptr;
  size_t run_slot_ = SIZE_MAX;  // run_->devices slot of device run_slot_device_ (run_dev())
  uint32_t run_slot_device_ = 0;
  // The stack named by the last AllocStack, per source: PyTorch's trace is merged by time
  // between a trace's AllocStack and the record it belongs to.
  struct Pending {
    uint32_t stack = 0, py = 0;
  };
  Pending pending_[2];
  Pending* pend_ = &pending_[0];

  // ---- what is kept only while reading ----
  std::map<std::tuple<std::string, uint64_t, uint64_t>, size_t> module_index_;
  std::map<uint64_t, size_t> module_map_;  // start address -> ProcessModel::modules index
  uint64_t module_generation_ = UINT64_MAX;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> vmm_mappings_;  // va -> (bytes, handle)
  // The allocator state at a device's in-use peak is taken until this time (the allocator's
  // records of the segment that made the peak come just after the driver's).
  std::map<uint32_t, uint64_t> frag_peak_until_;
  bool ranges_seen_ = false;
  // A thread's open NVTX ranges, outermost first ((name id, start)), and how many more were
  // pushed past kMaxRangeDepth and not popped yet.
  struct OpenRanges {
    std::vector<std::pair<uint32_t, uint64_t>> open;
    uint64_t deeper = 0;
  };
  std::unordered_map<uint32_t, OpenRanges> open_ranges_;
  std::map<uint32_t, std::vector<uint64_t>> top_range_starts_;  // depth-0 ranges by name id
  size_t range_starts_ = 0;                                     // in all of them
  std::string limit_;
  bool stopped_ = false;         // kMaxLive reached: records are no longer applied
  std::vector<uint64_t> steps_;  // vramtrace_step() times
  // The launch rhythm: per kernel name, its launches' times while it may mark iterations.
  // `separated`: launches with device memory allocated or freed since the name's previous
  // launch (what tells one kernel per iteration from a burst of it), `last_memory` the process's
  // memory_events_ at its previous launch.
  struct Rhythm {
    uint64_t count = 0, last_index = 0, gap = 0, gap_matches = 0;
    uint64_t separated = 0, last_memory = 0;
    bool dropped = false;
    std::vector<uint64_t> times;
  };
  std::vector<Rhythm> rhythm_;  // by kernel name id (ids are small: the library counts them)
  uint64_t launch_index_ = 0, rhythm_times_ = 0;
  uint64_t memory_events_ = 0;  // allocations, frees and failed allocations seen so far
};

// Finishing a run once its records are applied (collector/model/model_of.cpp; a live snapshot
// finishes copies the same way): PyTorch's context joins its process (before the builder's finish:
// the iterations and the fatal OOM read it), each process is finished with what its stream's reader
// said of it, and then the run (its origin, devices in order, the live sets at their peaks).
void attach_torch_context(ProcessModel& p, TorchContext context);
void finish_process(Run& run, ProcessModel& p, Builder& builder, const std::string& trace_name,
                    const std::string& stream_problem);
void finish_run(Run& run);

}  // namespace vramtrace::collector

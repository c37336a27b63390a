// The builder's dispatch and its hot path: driver allocations and frees, kernel launches and
// their rhythm (build_iterations.cpp finds the iterations from it), VMM handles and mappings,
// stream-ordered pools, and each event's share of the run-wide device totals (see builder.h). Kept
// in one file so that the compiler inlines the handlers into apply().
#include "collector/model/builder.h"

#include <algorithm>

namespace vramtrace::collector {

using format::Api;
using format::Record;
using format::RecordType;
namespace rec = format::rec;

namespace {

constexpr uint64_t kMaxRhythmTimes = 1u << 20;  // launch times kept for the rhythm, in all
constexpr uint32_t kMaxRhythmNames = 1u << 20;
constexpr uint64_t kPeakSettleNs = 1000000;  // allocator records of a peak come within 1 ms

// Arrays live in their own id space: an array handle may equal some device address.
uint64_t live_key(Api api, uint64_t id) {
  bool array =
      api == Api::cuArrayCreate || api == Api::cuArray3DCreate || api == Api::cuArrayDestroy;
  return array ? (id ^ 0xA000000000000000ull) : id;
}

bool is_async(Api api) {
  return api == Api::cuMemAllocAsync || api == Api::cuMemAllocFromPoolAsync;
}

// Keys a RunDevice by (host, index). `where` indexes run.devices (a linear search per event
// made a trace with many device ordinals take quadratic time: 40k devices, 1 minute).
RunDevice& run_device(Run& run, Builder::DeviceIndex& where, const std::string& host,
                      uint32_t index) {
  auto [it, added] = where.try_emplace({host, index}, run.devices.size());
  if (!added) return run.devices[it->second];
  run.devices.emplace_back();
  run.devices.back().host = host;
  run.devices.back().index = index;
  return run.devices.back();
}

}  // namespace

// `secondary`: the record comes from PyTorch's trace of this process, not from its own trace;
// `stream`: then a block's CUDA stream (PyTorch's trace has it, the UserBlock record has not).
void Builder::apply(const Record& r, bool secondary, uint64_t stream) {
  if (stopped_) [[unlikely]]
    return;
  pend_ = &pending_[secondary ? 1 : 0];
  ++p_->events;
  ++*seq_;
  const uint64_t t = r.time_ns;
  if (t) p_->end_ns = std::max(p_->end_ns, t);
  if (t && r.type != RecordType::ProcessExit) p_->work_end_ns = std::max(p_->work_end_ns, t);
  // An AllocStack belongs to the allocation record right after it, and to nothing else.
  if (r.type != RecordType::AllocStack && r.type != RecordType::Alloc &&
      r.type != RecordType::AllocFailed && r.type != RecordType::VmmCreate &&
      r.type != RecordType::UserBlock && r.type != RecordType::UserOom &&
      r.type != RecordType::PyStackNode)
    pend_->stack = pend_->py = 0;
  if (r.type == RecordType::Alloc || r.type == RecordType::Free ||
      r.type == RecordType::AllocFailed || r.type == RecordType::VmmCreate ||
      r.type == RecordType::VmmRelease || r.type == RecordType::UserBlock ||
      r.type == RecordType::UserOom)
    ++memory_events_;
  switch (r.type) {
    case RecordType::Process: return on_process(r.process);
    case RecordType::ContextCreate: return on_context(r.context_create, t);
    case RecordType::ContextDestroy: return;  // its memory goes by its own frees
    case RecordType::Alloc: return on_alloc(r.alloc, t);
    case RecordType::Free: return on_free(r.free, t);
    case RecordType::AllocFailed: return on_failed(r.alloc_failed, t);
    case RecordType::Launch: return on_launch(r.launch, t);
    case RecordType::String: return on_string(r.string);
    case RecordType::VmmCreate: return on_vmm_create(r.vmm_create, t);
    case RecordType::VmmRelease: return on_vmm_release(r.vmm_release, t);
    case RecordType::VmmMap: return on_vmm_map(r.vmm_map);
    case RecordType::VmmUnmap: return on_vmm_unmap(r.vmm_unmap, t);
    case RecordType::Dropped: return on_dropped(r.dropped);
    case RecordType::ProcessExit: return on_process_exit();
    case RecordType::Notice: return on_notice(r.notice);
    case RecordType::CuptiLibrary: p_->cupti_library = std::string(r.cupti_library.path); return;
    case RecordType::ExitStatus: return on_exit_status(r.exit_status);
    case RecordType::MemInfo: return on_mem_info(r.mem_info);
    case RecordType::PoolUsage: return on_pool_usage(r.pool_usage, t);
    case RecordType::StackNode: return on_stack_node(r.stack_node);
    case RecordType::PyStackNode: return on_py_stack_node(r.py_stack_node);
    case RecordType::PyCode: return on_py_code(r.py_code);
    case RecordType::AllocStack: return on_alloc_stack(r.alloc_stack);
    case RecordType::Module: return on_module(r.module);
    case RecordType::RangePush: return on_range_push(r.range_push, t);
    case RecordType::RangePop: return on_range_pop(r.range_pop, t);
    case RecordType::UserPool: return on_user_pool(r.user_pool);
    case RecordType::UserSegment: return on_user_segment(r.user_segment, t);
    case RecordType::UserBlock: return on_user_block(r.user_block, t, stream);
    case RecordType::UserOom: return on_allocator_oom(r.user_oom, t);
    case RecordType::Step: return on_step(t);
    case RecordType::Settings: return on_settings(r.settings);
    case RecordType::LaunchesStopped: return on_launches_stopped(r.launches_stopped, t);
  }
}

void Builder::finish() {
  find_iterations();
  // With PyTorch's trace, a driver failure that PyTorch never reported as its OOM was
  // recovered from (it freed cached blocks and the retry worked): not the user's OOM.
  if (p_->torch_trace)
    for (OomEvent& o : p_->ooms)
      if (!o.allocator) o.recovered = true;
  find_fatal_oom();
  // Grouped once: a scan of every live allocation per device was quadratic.
  std::map<uint32_t, std::vector<const Allocation*>> still_by_device;
  for (auto& [k, a] : p_->live) still_by_device[a.device].push_back(&a);
  for (auto& [k, h] : p_->vmm_handles) still_by_device[h.alloc.device].push_back(&h.alloc);
  std::map<uint32_t, std::vector<const Allocation*>> blocks_by_device;
  for (auto& [id, pool] : p_->user_pools)
    for (auto& [addr, b] : pool.view.blocks()) blocks_by_device[pool.device].push_back(&b);
  for (auto& [index, d] : p_->devices) {
    if (d.has_allocator_view) d.blocks_at_peak = d.blocks.live_at_peak(blocks_by_device[index]);
    d.live_at_peak = d.memory.live_at_peak(still_by_device[index]);
    std::sort(d.live_at_peak.begin(), d.live_at_peak.end(),
              [](const Allocation& a, const Allocation& b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes : a.seq < b.seq;
              });
  }
}

// One allocation more than kMaxLive would be live: the process is read no further.
void Builder::stop_at_live_limit(const char* what, uint64_t t) {
  stopped_ = true;
  reach_limit("more than " + std::to_string(kMaxLive) + " " + what +
              " live at once, the most one process may hold: its trace is read up to its event " +
              std::to_string(p_->events - 1) + " (at " + std::to_string(t) + " ns) and no further");
}

DeviceModel& Builder::find_device(uint32_t index) {
  auto [it, inserted] = p_->devices.try_emplace(index);
  if (inserted) it->second.index = index;
  last_device_ = &it->second;
  return it->second;
}

// The run-wide device of this process's device `index`, remembered like device(): finding
// it builds a (host, index) key, a string copy and compare per allocation and free. Slots of
// run_->devices do not move until model_of() sorts them after the last event; the host is the
// Process record's, so that record forgets the slot.
RunDevice& Builder::run_dev(uint32_t index) {
  if (run_slot_ != SIZE_MAX && run_slot_device_ == index) [[likely]]
    return run_->devices[run_slot_];
  RunDevice& rd = run_device(*run_, *where_, p_->host, index);
  run_slot_ = static_cast<size_t>(&rd - run_->devices.data());
  run_slot_device_ = index;
  return rd;
}

void Builder::on_alloc(const rec::Alloc& r, uint64_t t) {
  Allocation a = make(r.api, r.device, r.address, r.bytes, t, r.stream, r.thread);
  if (format::memory_kind(r.api) == format::MemoryKind::PinnedHost) {
    if (p_->live.size() + p_->live_host.size() + p_->vmm_handles.size() >= kMaxLive &&
        !p_->live_host.count(r.address)) [[unlikely]]
      return stop_at_live_limit("driver allocations", t);
    auto& prev = p_->live_host[r.address];
    if (prev.bytes) p_->pinned_host.remove(prev, t);
    prev = a;
    p_->pinned_host.add(a, t);
    ApiStats& s = p_->host_apis[api_slot(r.api)];
    ++s.calls;
    s.bytes += r.bytes;
    return;
  }
  uint64_t key = live_key(r.api, r.address);
  auto it = p_->live.find(key);
  if (it == p_->live.end() &&
      p_->live.size() + p_->live_host.size() + p_->vmm_handles.size() >= kMaxLive) [[unlikely]]
    return stop_at_live_limit("driver allocations", t);
  if (it != p_->live.end()) {
    // Same address handed out again without a free we saw (a dropped event): the old one
    // cannot still be live.
    ++device(it->second.device).replaced_without_free;
    remove_device(it->second, t);
    p_->live.erase(it);
  }
  p_->live.emplace(key, a);
  add_device(a, t);
}

void Builder::on_free(const rec::Free& r, uint64_t t) {
  if (format::memory_kind(r.api) == format::MemoryKind::PinnedHost) {
    auto it = p_->live_host.find(r.address);
    ++p_->host_apis[api_slot(r.api)].calls;
    if (it == p_->live_host.end()) return;
    p_->pinned_host.remove(it->second, t);
    ++p_->host_apis[api_slot(it->second.api)].frees;
    p_->live_host.erase(it);
    return;
  }
  DeviceModel& d = device(r.device);
  ++d.apis[api_slot(r.api)].calls;
  auto it = p_->live.find(live_key(r.api, r.address));
  if (it == p_->live.end()) {
    ++d.unmatched_frees;
    return;
  }
  ++device(it->second.device).apis[api_slot(it->second.api)].frees;
  remove_device(it->second, t);
  p_->live.erase(it);
}

void Builder::on_vmm_create(const rec::VmmCreate& r, uint64_t t) {
  if (p_->live.size() + p_->live_host.size() + p_->vmm_handles.size() >= kMaxLive &&
      !p_->vmm_handles.count(r.handle)) [[unlikely]]
    return stop_at_live_limit("driver allocations", t);
  Allocation a = make(Api::cuMemCreate, r.device, r.handle, r.bytes, t, 0, 0);
  VmmHandle& h = p_->vmm_handles[r.handle];
  if (h.alloc.bytes) remove_device(h.alloc, t);  // handle reused: lost release
  h = VmmHandle{a, false, 0};
  add_device(a, t);
}

void Builder::on_vmm_release(const rec::VmmRelease& r, uint64_t t) {
  auto it = p_->vmm_handles.find(r.handle);
  if (it == p_->vmm_handles.end()) return;
  ++device(it->second.alloc.device).apis[api_slot(Api::cuMemRelease)].calls;
  it->second.released = true;
  // Physical memory goes only once no mapping refers to it any more.
  if (it->second.mappings == 0) {
    remove_device(it->second.alloc, t);
    p_->vmm_handles.erase(it);
  }
}

void Builder::on_vmm_map(const rec::VmmMap& r) {
  auto it = p_->vmm_handles.find(r.handle);
  if (it == p_->vmm_handles.end()) return;
  ++it->second.mappings;
  ++device(it->second.alloc.device).apis[api_slot(Api::cuMemMap)].calls;
  device(it->second.alloc.device).apis[api_slot(Api::cuMemMap)].bytes += r.bytes;
  vmm_mappings_[r.address] = {r.bytes, r.handle};
}

void Builder::on_vmm_unmap(const rec::VmmUnmap& r, uint64_t t) {
  uint64_t end = r.address + r.bytes;
  for (auto it = vmm_mappings_.lower_bound(r.address);
       it != vmm_mappings_.end() && it->first < end;) {
    uint64_t handle = it->second.second;
    it = vmm_mappings_.erase(it);
    auto h = p_->vmm_handles.find(handle);
    if (h == p_->vmm_handles.end()) continue;
    ++device(h->second.alloc.device).apis[api_slot(Api::cuMemUnmap)].calls;
    if (h->second.mappings) --h->second.mappings;
    if (h->second.released && h->second.mappings == 0) {
      remove_device(h->second.alloc, t);
      p_->vmm_handles.erase(h);
    }
  }
}

void Builder::on_pool_usage(const rec::PoolUsage& r, uint64_t t) {
  DeviceModel& d = device(r.device);
  auto& pool = d.pools[r.pool];
  d.pool_reserved = d.pool_reserved - pool.reserved + r.reserved;
  pool.reserved = r.reserved;
  pool.used = r.used;
  pool.peak_reserved = std::max({pool.peak_reserved, r.reserved, r.reserved_high});
  d.update_footprint(t);
  // Between two (throttled) answers the pool may have reserved more than either showed:
  // the driver's high-water mark says how much, so the footprint's peak stays exact.
  if (r.reserved_high > r.reserved) {
    uint64_t at_high = d.footprint() - std::min(d.footprint(), r.reserved) + r.reserved_high;
    if (at_high > d.footprint_peak) d.footprint_peak = at_high;
  }
}

Allocation Builder::make(Api api, uint32_t device_index, uint64_t id, uint64_t bytes, uint64_t t,
                         uint64_t stream, uint32_t thread) {
  Allocation a;
  a.id = id;
  a.api = api;
  a.device = device_index;
  a.bytes = bytes;
  a.time_ns = t;
  a.seq = *seq_;
  a.process = process_;
  a.stream = stream;
  a.thread = thread;
  a.last_kernel = device(device_index).last_kernel;
  a.stack = pend_->stack;
  a.py_stack = pend_->py;
  pend_->stack = pend_->py = 0;
  if (ranges_seen_) {
    auto it = open_ranges_.find(thread);
    if (it != open_ranges_.end() && !it->second.open.empty())
      a.phase = it->second.open.back().first;
  }
  return a;
}

void Builder::add_device(const Allocation& a, uint64_t now) {
  DeviceModel& d = device(a.device);
  uint64_t before = d.memory.peak_bytes();
  d.memory.add(a, now);
  if (p_->torch_trace) d.driver_log.push_back({now, a.id, a.bytes, a.api, true});
  if (is_async(a.api)) d.async_live += a.bytes;
  d.update_footprint(now);
  if (d.memory.peak_bytes() > before) {
    d.kernel_at_peak = d.last_kernel;
    if (d.has_allocator_view) {
      d.frag_at_peak = allocator_state(a.device, now);
      frag_peak_until_[a.device] = now + kPeakSettleNs;
    }
    if (ranges_seen_) {
      d.phase_at_peak.clear();
      auto it = open_ranges_.find(a.thread);
      if (it != open_ranges_.end())
        for (auto& [name, start] : it->second.open) d.phase_at_peak.push_back(name);
    }
  }
  ++d.allocations;
  ApiStats& s = d.apis[api_slot(a.api)];
  ++s.calls;
  s.bytes += a.bytes;
  run_delta(a, now, true);
}

void Builder::remove_device(const Allocation& a, uint64_t now) {
  DeviceModel& d = device(a.device);
  d.memory.remove(a, now);
  if (p_->torch_trace) d.driver_log.push_back({now, a.id, a.bytes, a.api, false});
  if (is_async(a.api)) d.async_live -= std::min(d.async_live, a.bytes);
  d.update_footprint(now);
  ++d.frees;
  run_delta(a, now, false);
}

void Builder::run_delta(const Allocation& a, uint64_t now, bool added) {
  RunDevice& rd = run_dev(a.device);
  if (!rd.first_ns) rd.first_ns = now;
  // Unsigned arithmetic: sizes from a trace can reach 2^63, where int64_t overflows (UB).
  const uint64_t delta = added ? a.bytes : uint64_t{0} - a.bytes;
  rd.live_bytes += delta;
  uint64_t& mine = rd.live_by_pid[p_->pid];
  mine += delta;
  if (rd.live_bytes > rd.peak_bytes) {
    rd.peak_bytes = rd.live_bytes;
    rd.peak_time_ns = now;
    rd.peak_by_pid = rd.live_by_pid;
    rd.peak_seq = *seq_;
    rd.freed_after_peak.clear();
  } else if (!added && a.seq <= rd.peak_seq && rd.peak_bytes > 0) {
    rd.freed_after_peak.push_back(a);  // live at the peak
  }
  rd.timeline.add(now, rd.live_bytes);
}

void Builder::on_launch(const rec::Launch& r, uint64_t t) {
  // A launch its thread was recording while another disabled the callbacks: past the stop,
  // as if not recorded (the last kernel before a later allocation stays unknown).
  if (p_->launches_stopped_ns) return;
  DeviceModel& d = device(r.device);
  ++d.launches;
  const uint32_t id = r.name_id;
  d.launches_by_kernel.add(id);
  d.launch_timeline.add(t, d.launches);
  d.last_kernel = id;
  ++p_->host_apis[api_slot(r.api)].calls;
  on_rhythm(id, t);
}

// From here on launches are not recorded: no kernel is the last one before what follows.
void Builder::on_launches_stopped(const rec::LaunchesStopped& r, uint64_t t) {
  if (p_->launches_stopped_ns) return;
  p_->launches_stopped_ns = std::max<uint64_t>(t, 1);
  p_->launches_stop_reason = r.reason;
  for (auto& [index, d] : p_->devices) d.last_kernel = 0;
}

// Per kernel name, whether its launches come at a constant distance (in launches): such a
// kernel marks the iterations of a loop. Times are kept while the name may still be one.
void Builder::on_rhythm(uint32_t id, uint64_t now) {
  ++launch_index_;
  if (id >= kMaxRhythmNames) return;  // corrupt or crafted: no rhythm for it
  if (id >= rhythm_.size()) rhythm_.resize(id + 1);
  auto& r = rhythm_[id];
  if (r.count) {
    uint64_t gap = launch_index_ - r.last_index;
    if (r.count == 1 || (gap != r.gap && r.gap_matches == 0)) r.gap = gap;
    if (gap == r.gap) ++r.gap_matches;
    if (memory_events_ != r.last_memory) ++r.separated;
  }
  r.last_index = launch_index_;
  r.last_memory = memory_events_;
  ++r.count;
  if (r.dropped) return;
  // A name whose launches do not come at one distance cannot mark iterations: its times go.
  if (r.count >= 16 && r.gap_matches * 4 < (r.count - 1) * 3) {
    rhythm_times_ -= r.times.size();
    r.dropped = true;
    std::vector<uint64_t>().swap(r.times);
    return;
  }
  r.times.push_back(now);
  if (++rhythm_times_ > kMaxRhythmTimes) {
    // Drop the most frequent name's times: a kernel that marks iterations runs least often.
    Rhythm* worst = nullptr;
    for (auto& x : rhythm_)
      if (!x.dropped && !x.times.empty() && (!worst || x.count > worst->count)) worst = &x;
    if (worst) {
      rhythm_times_ -= worst->times.size();
      worst->dropped = true;
      std::vector<uint64_t>().swap(worst->times);
    }
  }
}
}  // namespace vramtrace::collector

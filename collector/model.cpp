// Rebuilding the allocation timeline from events (see model.h).
#include "collector/model.h"

#include "collector/live_collector.h"
#include "collector/torch_trace.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <tuple>

namespace vramtrace::collector {

using format::Api;
using format::RecordType;
namespace rec = format::rec;

namespace {

constexpr size_t kOomLiveCap = 256;
constexpr size_t kOomsWithLiveSet = 64;   // per process (see on_failed)
constexpr size_t kOomsWithSurvivors = 4;  // per process: their whole live set, for growth
constexpr size_t kMaxPhases = 20000;      // completed NVTX ranges kept per process
constexpr size_t kMaxRangeStarts = 1u << 20;
constexpr uint64_t kMaxRhythmTimes = 1u << 20;  // launch times kept for the rhythm, in all
constexpr uint32_t kMaxRhythmNames = 1u << 20;
constexpr uint64_t kPeakSettleNs = 1000000;  // allocator records of a peak come within 1 ms

size_t idx(Api api) {
  auto i = static_cast<size_t>(api);
  return i < static_cast<size_t>(Api::kCount) ? i : 0;
}

// Arrays live in their own id space: an array handle may equal some device address.
uint64_t live_key(Api api, uint64_t id) {
  bool array =
      api == Api::cuArrayCreate || api == Api::cuArray3DCreate || api == Api::cuArrayDestroy;
  return array ? (id ^ 0xA000000000000000ull) : id;
}

bool is_async(Api api) {
  return api == Api::cuMemAllocAsync || api == Api::cuMemAllocFromPoolAsync;
}

std::string hex_uuid(std::string_view raw) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    auto c = static_cast<unsigned char>(raw[i]);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::vector<std::string> split_nul(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find('\0', start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Keys a RunDevice by (host, index). `where` indexes run.devices (a linear search per event
// made a trace with many device ordinals take quadratic time: 40k devices, 1 minute).
RunDevice& run_device(Run& run, std::map<std::pair<std::string, uint32_t>, size_t>& where,
                      const std::string& host, uint32_t index) {
  auto [it, added] = where.try_emplace({host, index}, run.devices.size());
  if (!added) return run.devices[it->second];
  run.devices.emplace_back();
  run.devices.back().host = host;
  run.devices.back().index = index;
  return run.devices.back();
}

class Builder {
 public:
  using DeviceIndex = std::map<std::pair<std::string, uint32_t>, size_t>;
  // `seq`: the run's event counter, shared by the builders of its processes, so that the order
  // of allocations is known across processes (what was live at a device's run-wide peak).
  Builder(Run& run, ProcessModel& p, DeviceIndex& where, uint64_t& seq)
      : run_(run),
        p_(p),
        where_(where),
        seq_(seq),
        process_(static_cast<uint32_t>(&p - run.processes.data())) {}

  // `secondary`: the record comes from PyTorch's trace of this process, not from its own trace;
  // `stream`: then a block's CUDA stream (PyTorch's trace has it, the UserBlock record has not).
  void apply(const Record& r, bool secondary = false, uint64_t stream = 0) {
    pend_ = &pending_[secondary ? 1 : 0];
    ++p_.events;
    ++seq_;
    const uint64_t t = r.time_ns;
    if (t) p_.end_ns = std::max(p_.end_ns, t);
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
      ++p_.memory_events;
    switch (r.type) {
      case RecordType::Process: return on_process(r.process);
      case RecordType::ContextCreate: return on_context(r.context_create);
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
      case RecordType::CuptiLibrary: p_.cupti_library = std::string(r.cupti_library.path); return;
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
    }
  }

  void finish() {
    find_iterations();
    // With PyTorch's trace, a driver failure that PyTorch never reported as its OOM was
    // recovered from (it freed cached blocks and the retry worked): not the user's OOM.
    if (p_.torch_trace)
      for (OomEvent& o : p_.ooms)
        if (!o.allocator) o.recovered = true;
    find_fatal_oom();
    // Grouped once: a scan of every live allocation per device was quadratic.
    std::map<uint32_t, std::vector<const Allocation*>> still_by_device;
    for (auto& [k, a] : p_.live) still_by_device[a.device].push_back(&a);
    for (auto& [k, h] : p_.vmm_handles) still_by_device[h.alloc.device].push_back(&h.alloc);
    std::map<uint32_t, std::vector<const Allocation*>> blocks_by_device;
    for (auto& [id, pool] : p_.user_pools)
      for (auto& [addr, b] : pool.view.blocks()) blocks_by_device[pool.device].push_back(&b);
    for (auto& [index, d] : p_.devices) {
      if (d.has_allocator_view) d.blocks_at_peak = d.blocks.live_at_peak(blocks_by_device[index]);
      d.live_at_peak = d.memory.live_at_peak(still_by_device[index]);
      std::sort(d.live_at_peak.begin(), d.live_at_peak.end(),
                [](const Allocation& a, const Allocation& b) {
                  return a.bytes != b.bytes ? a.bytes > b.bytes : a.seq < b.seq;
                });
    }
  }

 private:
  // Most events name the device of the event before: remember it (std::map nodes are stable).
  // The check is inline and the lookup is not: with the lookup in it, GCC stopped inlining
  // device() into apply(), a call per use on the hot path.
  DeviceModel& device(uint32_t index) {
    if (last_device_ && last_device_->index == index) [[likely]]
      return *last_device_;
    return find_device(index);
  }
  [[gnu::noinline]] DeviceModel& find_device(uint32_t index) {
    auto [it, inserted] = p_.devices.try_emplace(index);
    if (inserted) it->second.index = index;
    last_device_ = &it->second;
    return it->second;
  }

  // The run-wide device of this process's device `index`, remembered like device(): finding
  // it builds a (host, index) key, a string copy and compare per allocation and free. Slots of
  // run_.devices do not move until analyze() sorts them after the last event; the host is the
  // Process record's, so that record forgets the slot.
  RunDevice& run_dev(uint32_t index) {
    if (run_slot_ != SIZE_MAX && run_slot_device_ == index) [[likely]]
      return run_.devices[run_slot_];
    RunDevice& rd = run_device(run_, where_, p_.host, index);
    run_slot_ = static_cast<size_t>(&rd - run_.devices.data());
    run_slot_device_ = index;
    return rd;
  }

  // ---- one handler per record type (apply() dispatches) ----

  void on_process(const rec::Process& r) {
    p_.has_process_record = true;
    p_.pid = r.pid;
    p_.ppid = r.ppid;
    p_.start_realtime_ns = r.realtime_ns;
    p_.start_ns = r.start_ns;
    p_.host = std::string(r.host);
    run_slot_ = SIZE_MAX;  // run-wide devices are keyed by host
    p_.exe = std::string(r.exe);
    p_.cmdline = split_nul(r.cmdline);
    const std::string_view env = r.rank_env;
    for (size_t start = 0; start < env.size();) {
      size_t end = env.find('\n', start);
      if (end == std::string_view::npos) end = env.size();
      std::string_view kv = env.substr(start, end - start);
      size_t eq = kv.find('=');
      // The run id is recorded among these variables, but is not a rank's.
      if (eq != std::string_view::npos && kv.substr(0, eq) != "VRAMTRACE_RUN_ID")
        p_.ranks.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
      start = end + 1;
    }
  }

  void on_context(const rec::ContextCreate& r) {
    DeviceModel& d = device(r.device);
    d.name = std::string(r.name);
    d.uuid = hex_uuid(r.uuid);
    d.total_bytes = r.total_bytes;
    RunDevice& rd = run_dev(r.device);
    rd.name = d.name;
    rd.uuid = d.uuid;
    rd.total_bytes = d.total_bytes;
  }

  // Taken right after an OOM: attach to it.
  void on_mem_info(const rec::MemInfo& r) {
    if (!p_.ooms.empty() && p_.ooms.back().device == r.device && !p_.ooms.back().free_bytes) {
      p_.ooms.back().free_bytes = r.free_bytes;
      p_.ooms.back().total_bytes = r.total_bytes;
    }
  }

  void on_launch(const rec::Launch& r, uint64_t t) {
    DeviceModel& d = device(r.device);
    ++d.launches;
    const uint32_t id = r.name_id;
    d.launches_by_kernel.add(id);
    d.launch_timeline.add(t, d.launches);
    d.last_kernel = id;
    ++p_.host_apis[idx(r.api)].calls;
    on_rhythm(id, t);
  }

  void on_range_push(const rec::RangePush& r, uint64_t t) {
    auto& open = p_.open_ranges[r.thread];
    open.emplace_back(r.name_id, t);
    if (open.size() == 1) {
      auto& starts = p_.top_range_starts[r.name_id];
      if (starts.size() < kMaxRangeStarts) starts.push_back(t);
    }
    ranges_seen_ = true;
  }

  void on_range_pop(const rec::RangePop& r, uint64_t t) {
    auto it = p_.open_ranges.find(r.thread);
    if (it == p_.open_ranges.end() || it->second.empty()) return;  // pushed before we started
    auto [name, start] = it->second.back();
    it->second.pop_back();
    auto& st = p_.range_stats[name];
    ++st.count;
    st.total_ns += t - std::min(t, start);
    ++p_.phases_total;
    if (p_.phases.size() < kMaxPhases)
      p_.phases.push_back({name, r.thread, static_cast<uint32_t>(it->second.size()), start, t});
  }

  void on_step(uint64_t t) {
    if (p_.steps.size() < kMaxRangeStarts) p_.steps.push_back(t);
  }

  void on_user_pool(const rec::UserPool& r) {
    UserPool& pool = p_.user_pools[r.pool];
    pool.device = r.device;
    pool.torch = r.pool >= kTorchPoolBase;
    pool.name = pool.torch ? std::string(kTorchPoolName) : p_.kernel_name(r.name_id);
    if (pool.name.empty()) pool.name = "pool " + std::to_string(r.pool);
    device(r.device).has_allocator_view = true;
  }

  void on_user_segment(const rec::UserSegment& r, uint64_t t) {
    UserPool* pool = user_pool(r.pool);
    if (!pool) return;
    const format::SegmentOp op = r.op;
    bool joined = op == format::SegmentOp::Map || op == format::SegmentOp::Unmap;
    if (op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map)
      pool->view.add_segment(r.address, r.bytes, joined);
    else
      pool->view.remove_segment(r.address, r.bytes, joined);
    pool->peak_reserved = std::max(pool->peak_reserved, pool->view.state().reserved);
    on_allocator_change(pool->device, t,
                        op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map);
  }

  void on_user_block(const rec::UserBlock& r, uint64_t t, uint64_t stream) {
    UserPool* pool = user_pool(r.pool);
    if (!pool) {
      pend_->stack = pend_->py = 0;
      return;
    }
    if (r.bytes) {
      Allocation b = make(Api::Unknown, pool->device, r.address, r.bytes, t, stream, r.thread);
      b.space = 1;  // a block
      pool->view.alloc_block(b);
      pool->peak_in_use = std::max(pool->peak_in_use, pool->view.state().in_use);
      device(pool->device).blocks.add(b, t);
    } else if (auto freed = pool->view.free_block(r.address)) {
      device(pool->device).blocks.remove(*freed, t);
    }
    on_allocator_change(pool->device, t, r.bytes != 0);
  }

  void on_string(const rec::String& r) {
    p_.kernel_names[r.id] = std::string(r.text);  // kernel, range and pool names
  }

  void on_stack_node(const rec::StackNode& r) {
    StackNode n;
    n.parent = r.parent;
    n.ip = r.ip;
    auto it = p_.module_map.upper_bound(r.ip);
    if (it != p_.module_map.begin()) {
      --it;
      if (r.ip < p_.modules[it->second].end) n.module = static_cast<int64_t>(it->second);
    }
    p_.stack_nodes[r.id] = n;
  }

  void on_py_stack_node(const rec::PyStackNode& r) {
    StackNode n;
    n.parent = r.parent;
    n.python = true;
    n.code = r.code;
    n.line = r.line;
    p_.stack_nodes[r.id] = n;
  }

  void on_py_code(const rec::PyCode& r) {
    p_.py_codes[r.id] = {std::string(r.file), std::string(r.function)};
  }

  void on_alloc_stack(const rec::AllocStack& r) {
    pend_->stack = r.native_leaf;
    pend_->py = r.py_leaf;
  }

  void on_module(const rec::Module& r) {
    if (r.generation != p_.module_generation) {
      p_.module_generation = r.generation;
      p_.module_map.clear();
    }
    ModuleInfo m{std::string(r.path), std::string(r.build_id), r.load_bias, r.start, r.end};
    auto key = std::make_tuple(m.path, m.bias, m.start);
    auto [it, inserted] = module_index_.try_emplace(key, p_.modules.size());
    if (inserted) p_.modules.push_back(m);
    p_.module_map[m.start] = it->second;
  }

  void on_vmm_create(const rec::VmmCreate& r, uint64_t t) {
    Allocation a = make(Api::cuMemCreate, r.device, r.handle, r.bytes, t, 0, 0);
    VmmHandle& h = p_.vmm_handles[r.handle];
    if (h.alloc.bytes) remove_device(h.alloc, t);  // handle reused: lost release
    h = VmmHandle{a, false, 0};
    add_device(a, t);
  }

  void on_vmm_release(const rec::VmmRelease& r, uint64_t t) {
    auto it = p_.vmm_handles.find(r.handle);
    if (it == p_.vmm_handles.end()) return;
    ++device(it->second.alloc.device).apis[idx(Api::cuMemRelease)].calls;
    it->second.released = true;
    // Physical memory goes only once no mapping refers to it any more.
    if (it->second.mappings == 0) {
      remove_device(it->second.alloc, t);
      p_.vmm_handles.erase(it);
    }
  }

  void on_vmm_map(const rec::VmmMap& r) {
    auto it = p_.vmm_handles.find(r.handle);
    if (it == p_.vmm_handles.end()) return;
    ++it->second.mappings;
    ++device(it->second.alloc.device).apis[idx(Api::cuMemMap)].calls;
    device(it->second.alloc.device).apis[idx(Api::cuMemMap)].bytes += r.bytes;
    p_.vmm_mappings[r.address] = {r.bytes, r.handle};
  }

  void on_vmm_unmap(const rec::VmmUnmap& r, uint64_t t) {
    uint64_t end = r.address + r.bytes;
    for (auto it = p_.vmm_mappings.lower_bound(r.address);
         it != p_.vmm_mappings.end() && it->first < end;) {
      uint64_t handle = it->second.second;
      it = p_.vmm_mappings.erase(it);
      auto h = p_.vmm_handles.find(handle);
      if (h == p_.vmm_handles.end()) continue;
      ++device(h->second.alloc.device).apis[idx(Api::cuMemUnmap)].calls;
      if (h->second.mappings) --h->second.mappings;
      if (h->second.released && h->second.mappings == 0) {
        remove_device(h->second.alloc, t);
        p_.vmm_handles.erase(h);
      }
    }
  }

  void on_dropped(const rec::Dropped& r) { p_.dropped_events += r.count; }

  void on_process_exit() { p_.clean_exit = true; }

  // The library writes the status as the parent sees it; a larger value no writer produces is
  // not taken (the exit status stays unknown).
  void on_exit_status(const rec::ExitStatus& r) {
    if (r.status <= 255) p_.exit_status = static_cast<int>(r.status);
  }

  void on_settings(const rec::Settings& r) { p_.launches_recorded = r.launches != 0; }

  void on_notice(const rec::Notice& r) {
    p_.notices.emplace_back(r.text);
    if (p_.not_profiled.empty())
      p_.not_profiled = r.text.empty() ? "(no reason given)" : std::string(r.text);
  }

  void on_pool_usage(const rec::PoolUsage& r, uint64_t t) {
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

  Allocation make(Api api, uint32_t device_index, uint64_t id, uint64_t bytes, uint64_t t,
                  uint64_t stream, uint32_t thread) {
    Allocation a;
    a.id = id;
    a.api = api;
    a.device = device_index;
    a.bytes = bytes;
    a.time_ns = t;
    a.seq = seq_;
    a.process = process_;
    a.stream = stream;
    a.thread = thread;
    a.last_kernel = device(device_index).last_kernel;
    a.stack = pend_->stack;
    a.py_stack = pend_->py;
    pend_->stack = pend_->py = 0;
    if (ranges_seen_) {
      auto it = p_.open_ranges.find(thread);
      if (it != p_.open_ranges.end() && !it->second.empty()) a.phase = it->second.back().first;
    }
    return a;
  }

  UserPool* user_pool(uint64_t id) {
    auto it = p_.user_pools.find(id);
    return it == p_.user_pools.end() ? nullptr : &it->second;
  }

  FragmentationState allocator_state(uint32_t device_index, uint64_t now) const {
    FragmentationState sum;
    for (auto& [id, pool] : p_.user_pools)
      if (pool.device == device_index) sum.add(pool.view.state());
    sum.time_ns = now;
    return sum;
  }

  // A pool of `device_index` changed: the device's sums, their timelines, the state at the
  // in-use peak while it settles, and the moments of most in use and most free.
  void on_allocator_change(uint32_t device_index, uint64_t now, bool grew) {
    DeviceModel& d = device(device_index);
    d.has_allocator_view = true;
    d.frag = allocator_state(device_index, now);
    d.frag_free_timeline.add(now, d.frag.free_bytes());
    d.frag_largest_timeline.add(now, d.frag.largest_free);
    if (grew && d.frag_at_peak && now <= d.frag_peak_until) d.frag_at_peak = d.frag;
    if (d.frag.in_use > d.allocator_peak_in_use) {
      d.allocator_peak_in_use = d.frag.in_use;
      d.allocator_peak_time = now;
    }
    if (d.frag.free_bytes() > d.frag_most_free.free_bytes()) d.frag_most_free = d.frag;
  }

  // Everything of a device live now: driver allocations (not the segments a pool carves
  // blocks from: those are the pool's) and the pools' blocks.
  std::vector<Allocation> survivors(uint32_t device_index) const {
    std::vector<Allocation> out;
    for (auto& [k, a] : p_.live)
      if (a.device == device_index && !held_by_pool(a)) out.push_back(a);
    for (auto& [k, h] : p_.vmm_handles)
      if (h.alloc.device == device_index && !held_by_pool(h.alloc)) out.push_back(h.alloc);
    for (auto& [id, pool] : p_.user_pools)
      if (pool.device == device_index)
        for (auto& [addr, b] : pool.view.blocks()) out.push_back(b);
    return out;
  }

  bool held_by_pool(const Allocation& a) const { return collector::held_by_pool(p_, a); }

  // The pool could not serve a request. PyTorch reports its OOM after the driver's failed
  // cuMemAlloc (and its retry after freeing cached blocks): that OOM gets the pool's view;
  // otherwise (a pool that never asked the driver) it is an OOM of its own.
  void on_allocator_oom(const rec::UserOom& r, uint64_t t) {
    const uint32_t stack = pend_->stack, py_stack = pend_->py;
    pend_->stack = pend_->py = 0;
    UserPool* pool = user_pool(r.pool);
    if (!pool) return;
    ++pool->ooms;
    constexpr uint64_t kSameEpisodeNs = 2000000000;
    OomEvent* o = nullptr;
    auto same_episode = [&](const OomEvent& x) {
      return x.device == pool->device && !x.allocator &&
             t - std::min(t, x.time_ns) <= kSameEpisodeNs;
    };
    if (!p_.ooms.empty() && same_episode(p_.ooms.back())) {
      // The driver's failures of this episode (PyTorch's first try and its retry after
      // freeing cached blocks) are one OOM: the last, which keeps the count.
      size_t first = p_.ooms.size() - 1;
      while (first > 0 && same_episode(p_.ooms[first - 1])) --first;
      uint64_t attempts = 0;
      for (size_t i = first; i < p_.ooms.size(); ++i) attempts += p_.ooms[i].driver_attempts;
      p_.ooms.erase(p_.ooms.begin() + static_cast<std::ptrdiff_t>(first), p_.ooms.end() - 1);
      o = &p_.ooms.back();
      o->driver_attempts = attempts;
    }
    if (!o) {
      p_.ooms.emplace_back();
      o = &p_.ooms.back();
      o->driver_attempts = 0;
      o->device = pool->device;
      o->pid = p_.pid;
      o->requested_bytes = r.bytes;
      o->time_ns = t;
      o->thread = r.thread;
      o->live_bytes = device(pool->device).memory.live_bytes();
      o->last_kernel = p_.kernel_name(device(pool->device).last_kernel);
      o->stack = stack;
      if (r.free_plus_one) o->free_bytes = r.free_plus_one - 1;
      fill_live_set(*o);
    }
    if (py_stack && !o->py_stack) o->py_stack = py_stack;
    if (stack && !o->stack) o->stack = stack;
    o->allocator = true;
    o->pool = pool->name;
    o->allocator_request = r.bytes;
    o->fragmentation = allocator_state(pool->device, t);
    if (p_.ooms.size() <= kOomsWithSurvivors) o->survivors = survivors(pool->device);
  }

  // Per kernel name, whether its launches come at a constant distance (in launches): such a
  // kernel marks the iterations of a loop. Times are kept while the name may still be one.
  void on_rhythm(uint32_t id, uint64_t now) {
    ++p_.launch_index;
    if (id >= kMaxRhythmNames) return;  // corrupt or crafted: no rhythm for it
    if (id >= p_.rhythm.size()) p_.rhythm.resize(id + 1);
    auto& r = p_.rhythm[id];
    if (r.count) {
      uint64_t gap = p_.launch_index - r.last_index;
      if (r.count == 1 || (gap != r.gap && r.gap_matches == 0)) r.gap = gap;
      if (gap == r.gap) ++r.gap_matches;
      if (p_.memory_events != r.last_memory) ++r.separated;
    }
    r.last_index = p_.launch_index;
    r.last_memory = p_.memory_events;
    ++r.count;
    if (r.dropped) return;
    // A name whose launches do not come at one distance cannot mark iterations: its times go.
    if (r.count >= 16 && r.gap_matches * 4 < (r.count - 1) * 3) {
      p_.rhythm_times -= r.times.size();
      r.dropped = true;
      std::vector<uint64_t>().swap(r.times);
      return;
    }
    r.times.push_back(now);
    if (++p_.rhythm_times > kMaxRhythmTimes) {
      // Drop the most frequent name's times: a kernel that marks iterations runs least often.
      ProcessModel::Rhythm* worst = nullptr;
      for (auto& x : p_.rhythm)
        if (!x.dropped && !x.times.empty() && (!worst || x.count > worst->count)) worst = &x;
      if (worst) {
        p_.rhythm_times -= worst->times.size();
        worst->dropped = true;
        std::vector<uint64_t>().swap(worst->times);
      }
    }
  }

  // Iterations, best source first: vramtrace_step() calls; the depth-0 NVTX range that repeats
  // most; the kernel that repeats at a constant distance with the longest period.
  // Which OOM ended the job. With the start-up hook's record of the exception that reached
  // the top: the allocator's last OOM before it, if it was an OutOfMemoryError (none if the
  // program ended otherwise: every OOM was survived). Without it: the last OOM not recovered
  // from of a process that did not reach exit() cleanly or gave exit() a non-zero status (a
  // native program that checks cudaMalloc and exits with its own error code after the OOM).
  void find_fatal_oom() {
    OomEvent* last = nullptr;
    const TorchContext* ctx = p_.torch_memory ? &p_.torch_memory->context() : nullptr;
    // JAX: an OOM inside XLA's preallocated pool never reaches the driver; the exception that
    // ended the program ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate N
    // bytes") is the OOM, measured against the pool.
    if (ctx && !ctx->xla.empty() && ctx->exception &&
        ctx->exception->message.find("RESOURCE_EXHAUSTED") != std::string::npos) {
      const auto& [device, pool] = *ctx->xla.begin();
      OomEvent o;
      o.device = device;
      o.pid = p_.pid;
      o.time_ns = ctx->exception->time_ns;
      o.allocator = true;
      o.pool = "XLA";
      o.fatal = true;
      const std::string& m = ctx->exception->message;
      size_t at = m.find("allocate ");
      if (at != std::string::npos) {
        // "allocate 8589934592 bytes" or "allocate 8.00GiB"
        char* end = nullptr;
        const double v = std::strtod(m.c_str() + at + 9, &end);
        double scale = 1;
        if (end && std::strncmp(end, "KiB", 3) == 0)
          scale = 1024.0;
        else if (end && std::strncmp(end, "MiB", 3) == 0)
          scale = 1024.0 * 1024;
        else if (end && std::strncmp(end, "GiB", 3) == 0)
          scale = 1024.0 * 1024 * 1024;
        else if (end && std::strncmp(end, "TiB", 3) == 0)
          scale = 1024.0 * 1024 * 1024 * 1024;
        if (v > 0 && v * scale < 1.8e19) o.requested_bytes = static_cast<uint64_t>(v * scale + 0.5);
      }
      o.allocator_request = o.requested_bytes;
      o.live_bytes = pool.in_use;
      if (p_.devices.count(device) && p_.devices[device].total_bytes)
        o.total_bytes = p_.devices[device].total_bytes;
      o.api = format::Api::Unknown;
      p_.ooms.push_back(std::move(o));
      return;
    }
    if (ctx && ctx->present) {
      const auto& x = ctx->exception;
      if (!x || x->type.find("OutOfMemoryError") == std::string::npos) return;
      for (OomEvent& o : p_.ooms)
        if (o.allocator && o.time_ns <= x->time_ns) last = &o;
    } else {
      if (p_.clean_exit && p_.exit_status.value_or(0) == 0) return;
      for (OomEvent& o : p_.ooms)
        if (!o.recovered) last = &o;
    }
    if (last) last->fatal = true;
  }

  void find_iterations() {
    // The optimizer's steps are exact iterations; so are vramtrace_step() and NVTX ranges;
    // the forwards of the first model stand in for an evaluation; the launch rhythm is the
    // last resort, never used for a PyTorch program whose hook saw its forwards.
    const TorchMemory* tm = p_.torch_memory.get();
    if (tm && tm->optimizer_steps() > 0) {
      p_.iterations = tm->iterations();
      p_.iteration_source = tm->iteration_source();
      return;
    }
    if (p_.steps.size() >= 2) {
      p_.iterations = p_.steps;
      p_.iteration_source = "vramtrace_step()";
      return;
    }
    uint32_t best = 0;
    size_t best_n = 0;
    for (auto& [name, starts] : p_.top_range_starts)
      if (starts.size() > best_n) {
        best = name;
        best_n = starts.size();
      }
    if (best_n >= 3) {
      p_.iterations = p_.top_range_starts[best];
      p_.iteration_source = "NVTX range '" + p_.kernel_name(best) + "'";
      return;
    }
    if (tm && !tm->iterations().empty()) {
      p_.iterations = tm->iterations();
      p_.iteration_source = tm->iteration_source();
      return;
    }
    const ProcessModel::Rhythm* anchor = nullptr;
    uint32_t anchor_id = 0;
    for (uint32_t id = 0; id < p_.rhythm.size(); ++id) {
      const auto& r = p_.rhythm[id];
      if (r.dropped || r.count < 3 || r.gap < 1) continue;
      // At most one in ten gaps may differ (a warm-up iteration, a checkpoint step).
      if (r.gap_matches * 10 < (r.count - 1) * 9) continue;
      // A kernel launched back to back (one kernel per iteration) marks iterations only when
      // device memory was allocated or freed between most of its launches and it is still
      // launched in the last tenth of the run's launches: a burst of the same kernel at
      // start-up has nothing between its launches, or stops long before the end.
      if (r.gap == 1 && (r.separated * 2 < r.count - 1 || r.last_index * 10 < p_.launch_index * 9))
        continue;
      // ... and it spans at least half of the run's launches (not a burst at start-up).
      if (r.count * r.gap * 2 < p_.launch_index) continue;
      if (!anchor || r.gap > anchor->gap ||
          (r.gap == anchor->gap && r.times.front() < anchor->times.front())) {
        anchor = &r;
        anchor_id = id;
      }
    }
    if (anchor) {
      p_.iterations = anchor->times;
      p_.iteration_kernel = anchor_id;
      p_.iteration_period = anchor->gap;
      p_.iteration_source = "kernel";
    }
  }

  void add_device(const Allocation& a, uint64_t now) {
    DeviceModel& d = device(a.device);
    uint64_t before = d.memory.peak_bytes();
    d.memory.add(a, now);
    if (p_.torch_trace) d.driver_log.push_back({now, a.id, a.bytes, a.api, true});
    if (is_async(a.api)) d.async_live += a.bytes;
    d.update_footprint(now);
    if (d.memory.peak_bytes() > before) {
      d.kernel_at_peak = d.last_kernel;
      if (d.has_allocator_view) {
        d.frag_at_peak = allocator_state(a.device, now);
        d.frag_peak_until = now + kPeakSettleNs;
      }
      if (ranges_seen_) {
        d.phase_at_peak.clear();
        auto it = p_.open_ranges.find(a.thread);
        if (it != p_.open_ranges.end())
          for (auto& [name, start] : it->second) d.phase_at_peak.push_back(name);
      }
    }
    ++d.allocations;
    ApiStats& s = d.apis[idx(a.api)];
    ++s.calls;
    s.bytes += a.bytes;
    run_delta(a, now, true);
  }

  void remove_device(const Allocation& a, uint64_t now) {
    DeviceModel& d = device(a.device);
    d.memory.remove(a, now);
    if (p_.torch_trace) d.driver_log.push_back({now, a.id, a.bytes, a.api, false});
    if (is_async(a.api)) d.async_live -= std::min(d.async_live, a.bytes);
    d.update_footprint(now);
    ++d.frees;
    run_delta(a, now, false);
  }

  void run_delta(const Allocation& a, uint64_t now, bool added) {
    RunDevice& rd = run_dev(a.device);
    // Unsigned arithmetic: sizes from a trace can reach 2^63, where int64_t overflows (UB).
    const uint64_t delta = added ? a.bytes : uint64_t{0} - a.bytes;
    rd.live_bytes += delta;
    uint64_t& mine = rd.live_by_pid[p_.pid];
    mine += delta;
    if (rd.live_bytes > rd.peak_bytes) {
      rd.peak_bytes = rd.live_bytes;
      rd.peak_time_ns = now;
      rd.peak_by_pid = rd.live_by_pid;
      rd.peak_seq = seq_;
      rd.freed_after_peak.clear();
    } else if (!added && a.seq <= rd.peak_seq && rd.peak_bytes > 0) {
      rd.freed_after_peak.push_back(a);  // live at the peak
    }
    rd.timeline.add(now, rd.live_bytes);
  }

  void on_alloc(const rec::Alloc& r, uint64_t t) {
    Allocation a = make(r.api, r.device, r.address, r.bytes, t, r.stream, r.thread);
    if (format::memory_kind(r.api) == format::MemoryKind::PinnedHost) {
      auto& prev = p_.live_host[r.address];
      if (prev.bytes) p_.pinned_host.remove(prev, t);
      prev = a;
      p_.pinned_host.add(a, t);
      ApiStats& s = p_.host_apis[idx(r.api)];
      ++s.calls;
      s.bytes += r.bytes;
      return;
    }
    uint64_t key = live_key(r.api, r.address);
    auto it = p_.live.find(key);
    if (it != p_.live.end()) {
      // Same address handed out again without a free we saw (a dropped event): the old one
      // cannot still be live.
      ++device(it->second.device).replaced_without_free;
      remove_device(it->second, t);
      p_.live.erase(it);
    }
    p_.live.emplace(key, a);
    add_device(a, t);
  }

  void on_free(const rec::Free& r, uint64_t t) {
    if (format::memory_kind(r.api) == format::MemoryKind::PinnedHost) {
      auto it = p_.live_host.find(r.address);
      ++p_.host_apis[idx(r.api)].calls;
      if (it == p_.live_host.end()) return;
      p_.pinned_host.remove(it->second, t);
      ++p_.host_apis[idx(it->second.api)].frees;
      p_.live_host.erase(it);
      return;
    }
    DeviceModel& d = device(r.device);
    ++d.apis[idx(r.api)].calls;
    auto it = p_.live.find(live_key(r.api, r.address));
    if (it == p_.live.end()) {
      ++d.unmatched_frees;
      return;
    }
    ++device(it->second.device).apis[idx(it->second.api)].frees;
    remove_device(it->second, t);
    p_.live.erase(it);
  }

  void on_failed(const rec::AllocFailed& r, uint64_t t) {
    const uint32_t stack = pend_->stack, py_stack = pend_->py;
    pend_->stack = pend_->py = 0;
    DeviceModel& d = device(r.device);
    ++d.apis[idx(r.api)].failed;
    constexpr uint64_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
    if (r.result != kOutOfMemory) {
      ++p_.failures_by_result[r.result];
      return;
    }
    OomEvent o;
    o.device = r.device;
    o.pid = p_.pid;
    o.requested_bytes = r.bytes;
    o.time_ns = t;
    o.api = r.api;
    o.result = r.result;
    o.thread = r.thread;
    o.live_bytes = d.memory.live_bytes();
    o.last_kernel = p_.kernel_name(d.last_kernel);
    o.stack = stack;
    o.py_stack = py_stack;
    if (d.has_allocator_view) o.fragmentation = allocator_state(r.device, t);
    if (p_.ooms.size() < kOomsWithSurvivors) o.survivors = survivors(r.device);
    fill_live_set(o);
    p_.ooms.push_back(std::move(o));
  }

  // Only the first OOMs keep their live set: a trace of many OOMs (a retry loop, a corrupt
  // or crafted file) must not cost OOMs x live allocations (250 KB of trace took 2 GiB).
  void fill_live_set(OomEvent& o) {
    if (p_.ooms.size() >= kOomsWithLiveSet) return;
    for (auto& [k, a] : p_.live)
      if (a.device == o.device) o.live.push_back(a);
    for (auto& [k, h] : p_.vmm_handles)
      if (h.alloc.device == o.device) o.live.push_back(h.alloc);
    std::sort(o.live.begin(), o.live.end(),
              [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });
    if (o.live.size() > kOomLiveCap) o.live.resize(kOomLiveCap);
  }

  Run& run_;
  ProcessModel& p_;
  DeviceIndex& where_;  // run_.devices by (host, index), shared by the builders of a run
  uint64_t& seq_;
  uint32_t process_ = 0;  // index of p_ in run_.processes
  DeviceModel* last_device_ = nullptr;
  size_t run_slot_ = SIZE_MAX;  // run_.devices slot of device run_slot_device_ (run_dev())
  uint32_t run_slot_device_ = 0;
  // The stack named by the last AllocStack, per source: PyTorch's trace is merged by time
  // between a trace's AllocStack and the record it belongs to.
  struct Pending {
    uint32_t stack = 0, py = 0;
  };
  Pending pending_[2];
  Pending* pend_ = &pending_[0];
  bool ranges_seen_ = false;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, size_t> module_index_;
};

}  // namespace

bool held_by_pool(const ProcessModel& p, const Allocation& a) {
  for (auto& [id, pool] : p.user_pools) {
    if (pool.device != a.device) continue;
    if (a.api == Api::cuMemCreate ? pool.torch : pool.view.covers(a.id, a.bytes)) return true;
  }
  return false;
}

void LaunchCounts::add_new(uint32_t id) {
  if (id >= kDenseIds) {
    if (sparse_[id]++ == 0) ++distinct_;
    return;
  }
  dense_.resize(id + 1);
  dense_[id] = 1;
  ++distinct_;
}

uint64_t LaunchCounts::of(uint32_t id) const {
  if (id < dense_.size()) return dense_[id];
  auto it = sparse_.find(id);
  return it == sparse_.end() ? 0 : it->second;
}

std::vector<std::pair<uint32_t, uint64_t>> LaunchCounts::all() const {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  out.reserve(distinct_);
  for (uint32_t id = 0; id < dense_.size(); ++id)
    if (dense_[id]) out.emplace_back(id, dense_[id]);
  out.insert(out.end(), sparse_.begin(), sparse_.end());
  return out;
}

const std::string& ProcessModel::kernel_name(uint32_t id) const {
  static const std::string graph = "(graph launch)";
  static const std::string none;
  if (id == 0) return none;
  auto it = kernel_names.find(id);
  return it == kernel_names.end() ? none : it->second;
}

void Timeline::add_bucket(uint64_t t, uint64_t bytes) {
  if (!started_) {
    origin_ = t;
    started_ = true;
  }
  uint64_t start = origin_ + (t >= origin_ ? (t - origin_) / width_ * width_ : 0);
  if (!points_.empty() && points_.back().time_ns == start) {
    points_.back().observe(bytes, t);
    return;
  }
  points_.push_back({start, bytes, bytes, bytes, t, t});
  if (points_.size() > max_points_) coarsen();
}

void Timeline::coarsen() {
  while (points_.size() > max_points_) {
    width_ *= 2;
    std::vector<Point> merged;
    merged.reserve(points_.size() / 2 + 1);
    for (const Point& p : points_) {
      uint64_t start = origin_ + (p.time_ns - origin_) / width_ * width_;
      if (!merged.empty() && merged.back().time_ns == start) {
        merged.back().merge(p);
      } else {
        merged.push_back({start, p.max_bytes, p.last_bytes, p.min_bytes, p.max_ns, p.min_ns});
      }
    }
    points_.swap(merged);
  }
}

void PeakTracker::add(const Allocation& a, uint64_t now) {
  live_ += a.bytes;
  if (live_ > peak_) {
    peak_ = live_;
    peak_time_ = now;
    peak_seq_ = a.seq;
    freed_after_peak_.clear();
  }
  timeline.add(now, live_);
}

void PeakTracker::remove(const Allocation& a, uint64_t now) {
  live_ -= std::min(live_, a.bytes);
  if (a.seq <= peak_seq_ && peak_ > 0) freed_after_peak_.push_back(a);
  timeline.add(now, live_);
}

std::vector<Allocation> PeakTracker::live_at_peak(
    const std::vector<const Allocation*>& still_live) const {
  std::vector<Allocation> out = freed_after_peak_;
  for (const Allocation* a : still_live)
    if (a->seq <= peak_seq_) out.push_back(*a);
  return out;
}

Run analyze(const std::vector<std::string>& trace_paths) {
  std::vector<std::unique_ptr<TraceReader>> readers;
  std::vector<std::string> torch_paths;
  for (const auto& path : trace_paths) {
    if ((path.size() > 6 && path.compare(path.size() - 6, 6, ".torch") == 0) ||
        (path.size() > 4 && path.compare(path.size() - 4, 4, ".jax") == 0))
      torch_paths.push_back(path);
    else
      readers.push_back(std::make_unique<TraceReader>(path));
  }
  return analyze(std::move(readers), torch_paths);
}

Run analyze(std::vector<std::unique_ptr<TraceReader>> readers,
            const std::vector<std::string>& torch_paths) {
  Run run;
  run.processes.resize(readers.size());
  std::vector<Builder> builders;
  builders.reserve(readers.size());
  Builder::DeviceIndex where;
  uint64_t seq = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    run.processes[i].trace_path = readers[i]->name();
    builders.emplace_back(run, run.processes[i], where, seq);
  }
  std::vector<TorchTrace> torch;
  for (const auto& path : torch_paths) {
    try {
      torch.push_back(read_torch_trace(path));
      if (!torch.back().problem.empty()) run.problems.push_back(path + ": " + torch.back().problem);
    } catch (const TraceError& e) {
      run.problems.push_back(e.what());
    }
  }

  // k-way merge by time, so that the run-wide device totals see every process in order.
  // Records without a time (strings, notices) take the time of the record before them.
  // Sources: the traces (one per process), then PyTorch's traces, each fed to the builder of
  // its process.
  struct Head {
    uint64_t time;
    size_t source;
    bool operator>(const Head& o) const {
      return time != o.time ? time > o.time : source > o.source;
    }
  };
  const size_t n_sources = readers.size() + torch.size();
  std::vector<Record> pending(readers.size());
  std::vector<size_t> torch_pos(torch.size(), 0);
  std::vector<size_t> builder_of(n_sources, SIZE_MAX);
  std::vector<size_t> torch_of(readers.size(), SIZE_MAX);  // process -> its PyTorch trace
  std::vector<uint64_t> last_time(n_sources, 0);
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  auto event_of = [&](size_t i) -> const Record& {
    return i < readers.size()
               ? pending[i]
               : torch[i - readers.size()].events[torch_pos[i - readers.size()]].record;
  };
  auto pull = [&](size_t i) {
    if (i < readers.size()) {
      if (!readers[i]->next(pending[i])) return;
    } else if (torch_pos[i - readers.size()] >= torch[i - readers.size()].events.size()) {
      return;
    }
    const Record& r = event_of(i);
    if (r.time_ns) last_time[i] = r.time_ns;
    heads.push({last_time[i], i});
  };
  if (torch.empty() && readers.size() == 1) {
    while (readers[0]->next(pending[0])) builders[0].apply(pending[0]);
  } else {
    for (size_t i = 0; i < readers.size(); ++i) {
      builder_of[i] = i;
      pull(i);
    }
    // A trace starts with its Process record: PyTorch's trace goes to the process of its pid.
    for (size_t t = 0; t < torch.size(); ++t) {
      for (size_t i = 0; i < readers.size(); ++i)
        if (pending[i].type == RecordType::Process && pending[i].process.pid == torch[t].pid)
          builder_of[readers.size() + t] = i;
      if (builder_of[readers.size() + t] == SIZE_MAX) {
        run.problems.push_back("PyTorch allocator trace of pid " + std::to_string(torch[t].pid) +
                               " has no CUDA trace of that process: not merged");
        continue;
      }
      run.processes[builder_of[readers.size() + t]].torch_trace = true;
      run.processes[builder_of[readers.size() + t]].torch_trace_problem = torch[t].problem;
      torch_of[builder_of[readers.size() + t]] = t;
      pull(readers.size() + t);
    }
  }
  while (!heads.empty()) {
    Head h = heads.top();
    heads.pop();
    if (h.source < readers.size()) {
      builders[builder_of[h.source]].apply(pending[h.source]);
    } else {
      const TorchEvent& e =
          torch[h.source - readers.size()].events[torch_pos[h.source - readers.size()]];
      builders[builder_of[h.source]].apply(e.record, true, e.stream);
    }
    if (h.source >= readers.size()) ++torch_pos[h.source - readers.size()];
    pull(h.source);
  }

  for (size_t i = 0; i < readers.size(); ++i) {
    if (torch_of[i] != SIZE_MAX && torch[torch_of[i]].context.present) {
      run.processes[i].torch_memory =
          std::make_shared<const TorchMemory>(std::move(torch[torch_of[i]].context));
      run.processes[i].torch_context = std::shared_ptr<const TorchContext>(
          run.processes[i].torch_memory, &run.processes[i].torch_memory->context());
    } else if (torch_of[i] != SIZE_MAX) {
      run.processes[i].torch_context =
          std::make_shared<const TorchContext>(std::move(torch[torch_of[i]].context));
    }
    builders[i].finish();
    ProcessModel& p = run.processes[i];
    if (readers[i]->partial()) {
      p.problem = readers[i]->problem();
      run.problems.push_back(readers[i]->name() + ": " + p.problem);
    }
    if (!p.has_process_record) {
      run.problems.push_back(readers[i]->name() + ": no process record (empty stream)");
      // The launcher names each stream's file after the peer's pid (vramtrace.<pid>[-k].vtrace):
      // a process still running whose first frame had not arrived is still named.
      p.pid = pid_in_trace_name(readers[i]->name());
    }
    for (auto& [index, d] : p.devices)
      if (d.name.find("stand-in") != std::string::npos) run.stand_in = true;
  }
  run.origin_ns = UINT64_MAX;
  for (auto& p : run.processes)
    if (p.has_process_record) run.origin_ns = std::min(run.origin_ns, p.start_ns);
  if (run.origin_ns == UINT64_MAX) run.origin_ns = 0;
  std::sort(run.devices.begin(), run.devices.end(), [](const RunDevice& a, const RunDevice& b) {
    return a.host != b.host ? a.host < b.host : a.index < b.index;
  });
  // Live at each device's peak: freed after it, or still live at the end, and made before it.
  std::map<std::pair<std::string, uint32_t>, RunDevice*> by_key;
  for (RunDevice& d : run.devices) {
    by_key[{d.host, d.index}] = &d;
    d.live_at_peak = std::move(d.freed_after_peak);
    d.freed_after_peak = {};
  }
  for (const ProcessModel& p : run.processes) {
    auto consider = [&](const Allocation& a) {
      auto it = by_key.find({p.host, a.device});
      if (it != by_key.end() && a.seq <= it->second->peak_seq && it->second->peak_bytes)
        it->second->live_at_peak.push_back(a);
    };
    for (const auto& [k, a] : p.live) consider(a);
    for (const auto& [k, h] : p.vmm_handles) consider(h.alloc);
  }
  for (RunDevice& d : run.devices)
    std::sort(d.live_at_peak.begin(), d.live_at_peak.end(),
              [](const Allocation& a, const Allocation& b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes : a.seq < b.seq;
              });
  return run;
}

}  // namespace vramtrace::collector

// Rebuilding the allocation timeline from events (see model.h).
#include "collector/model.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace vramtrace::collector {

using format::Api;
using format::RecordType;

namespace {

constexpr size_t kOomLiveCap = 256;
constexpr size_t kOomsWithLiveSet = 64;  // per process (see on_failed)

size_t idx(Api api) {
  auto i = static_cast<size_t>(api);
  return i < static_cast<size_t>(Api::kCount) ? i : 0;
}

// Arrays live in their own id space: an array handle may equal some device address.
uint64_t live_key(Api api, uint64_t id) {
  bool array = api == Api::cuArrayCreate || api == Api::cuArray3DCreate ||
               api == Api::cuArrayDestroy;
  return array ? (id ^ 0xA000000000000000ull) : id;
}

bool is_async(Api api) {
  return api == Api::cuMemAllocAsync || api == Api::cuMemAllocFromPoolAsync;
}

std::string hex_uuid(const std::string& raw) {
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

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find('\0', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
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
  Builder(Run& run, ProcessModel& p, DeviceIndex& where) : run_(run), p_(p), where_(where) {}

  void apply(const Event& e) {
    ++p_.events;
    ++seq_;
    if (e.time_ns) p_.end_ns = std::max(p_.end_ns, e.time_ns);
    // An AllocStack belongs to the allocation record right after it, and to nothing else.
    if (e.type != RecordType::AllocStack && e.type != RecordType::Alloc &&
        e.type != RecordType::AllocFailed && e.type != RecordType::VmmCreate)
      pending_stack_ = pending_py_stack_ = 0;
    switch (e.type) {
      case RecordType::Process:
        p_.has_process_record = true;
        p_.pid = e.a;
        p_.ppid = e.b;
        p_.start_realtime_ns = e.c;
        p_.start_ns = e.time_ns;
        p_.host = e.text;
        p_.exe = e.text2;
        p_.cmdline = split_nul(e.text3);
        for (size_t start = 0; start < e.text4.size();) {
          size_t end = e.text4.find('\n', start);
          if (end == std::string::npos) end = e.text4.size();
          std::string kv = e.text4.substr(start, end - start);
          size_t eq = kv.find('=');
          if (eq != std::string::npos) p_.ranks.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
          start = end + 1;
        }
        break;
      case RecordType::ContextCreate: {
        DeviceModel& d = device(e.device);
        d.name = e.text;
        d.uuid = hex_uuid(e.text2);
        d.total_bytes = e.bytes;
        RunDevice& rd = run_device(run_, where_, p_.host, e.device);
        rd.name = d.name;
        rd.uuid = d.uuid;
        rd.total_bytes = d.total_bytes;
        break;
      }
      case RecordType::Alloc:
        on_alloc(e);
        break;
      case RecordType::Free:
        on_free(e);
        break;
      case RecordType::AllocFailed:
        on_failed(e);
        break;
      case RecordType::MemInfo:
        // Taken right after an OOM: attach to it.
        if (!p_.ooms.empty() && p_.ooms.back().device == e.device &&
            !p_.ooms.back().free_bytes) {
          p_.ooms.back().free_bytes = e.a;
          p_.ooms.back().total_bytes = e.b;
        }
        break;
      case RecordType::Launch: {
        DeviceModel& d = device(e.device);
        ++d.launches;
        uint32_t id = static_cast<uint32_t>(e.a);
        ++d.launches_by_kernel[id];
        d.launch_timeline.add(e.time_ns, d.launches);
        d.last_kernel = id;
        ++p_.host_apis[idx(e.api)].calls;
        break;
      }
      case RecordType::String:
        p_.kernel_names[static_cast<uint32_t>(e.a)] = e.text;
        break;
      case RecordType::StackNode: {
        StackNode n;
        n.parent = static_cast<uint32_t>(e.b);
        n.ip = e.address;
        auto it = p_.module_map.upper_bound(e.address);
        if (it != p_.module_map.begin()) {
          --it;
          if (e.address < p_.modules[it->second].end) n.module = static_cast<int64_t>(it->second);
        }
        p_.stack_nodes[static_cast<uint32_t>(e.a)] = n;
        break;
      }
      case RecordType::PyStackNode: {
        StackNode n;
        n.parent = static_cast<uint32_t>(e.b);
        n.python = true;
        n.code = static_cast<uint32_t>(e.c);
        n.line = static_cast<uint32_t>(e.bytes);
        p_.stack_nodes[static_cast<uint32_t>(e.a)] = n;
        break;
      }
      case RecordType::PyCode:
        p_.py_codes[static_cast<uint32_t>(e.a)] = {e.text, e.text2};
        break;
      case RecordType::AllocStack:
        pending_stack_ = static_cast<uint32_t>(e.a);
        pending_py_stack_ = static_cast<uint32_t>(e.b);
        break;
      case RecordType::Module: {
        if (e.a != p_.module_generation) {
          p_.module_generation = e.a;
          p_.module_map.clear();
        }
        ModuleInfo m{e.text, e.text2, e.address, e.b, e.c};
        auto key = std::make_tuple(m.path, m.bias, m.start);
        auto [it, inserted] = module_index_.try_emplace(key, p_.modules.size());
        if (inserted) p_.modules.push_back(m);
        p_.module_map[m.start] = it->second;
        break;
      }
      case RecordType::VmmCreate: {
        Allocation a = make(e, Api::cuMemCreate);
        VmmHandle& h = p_.vmm_handles[e.address];
        if (h.alloc.bytes) remove_device(h.alloc, e.time_ns);  // handle reused: lost release
        h = VmmHandle{a, false, 0};
        add_device(a, e.time_ns);
        break;
      }
      case RecordType::VmmRelease: {
        auto it = p_.vmm_handles.find(e.address);
        if (it == p_.vmm_handles.end()) break;
        ++device(it->second.alloc.device).apis[idx(Api::cuMemRelease)].calls;
        it->second.released = true;
        // Physical memory goes only once no mapping refers to it any more.
        if (it->second.mappings == 0) {
          remove_device(it->second.alloc, e.time_ns);
          p_.vmm_handles.erase(it);
        }
        break;
      }
      case RecordType::VmmMap: {
        auto it = p_.vmm_handles.find(e.b);
        if (it == p_.vmm_handles.end()) break;
        ++it->second.mappings;
        ++device(it->second.alloc.device).apis[idx(Api::cuMemMap)].calls;
        device(it->second.alloc.device).apis[idx(Api::cuMemMap)].bytes += e.bytes;
        p_.vmm_mappings[e.address] = {e.bytes, e.b};
        break;
      }
      case RecordType::VmmUnmap: {
        uint64_t end = e.address + e.bytes;
        for (auto it = p_.vmm_mappings.lower_bound(e.address);
             it != p_.vmm_mappings.end() && it->first < end;) {
          uint64_t handle = it->second.second;
          it = p_.vmm_mappings.erase(it);
          auto h = p_.vmm_handles.find(handle);
          if (h == p_.vmm_handles.end()) continue;
          ++device(h->second.alloc.device).apis[idx(Api::cuMemUnmap)].calls;
          if (h->second.mappings) --h->second.mappings;
          if (h->second.released && h->second.mappings == 0) {
            remove_device(h->second.alloc, e.time_ns);
            p_.vmm_handles.erase(h);
          }
        }
        break;
      }
      case RecordType::Dropped:
        p_.dropped_events += e.a;
        break;
      case RecordType::ProcessExit:
        p_.clean_exit = true;
        break;
      case RecordType::Notice:
        p_.notices.push_back(e.text);
        break;
      case RecordType::ContextDestroy:
        break;
      case RecordType::PoolUsage: {
        DeviceModel& d = device(e.device);
        auto& pool = d.pools[e.address];
        d.pool_reserved = d.pool_reserved - pool.reserved + e.a;
        pool.reserved = e.a;
        pool.used = e.b;
        pool.peak_reserved = std::max({pool.peak_reserved, e.a, e.c});
        d.update_footprint(e.time_ns);
        // Between two (throttled) answers the pool may have reserved more than either showed:
        // the driver's high-water mark says how much, so the footprint's peak stays exact.
        if (e.c > e.a) {
          uint64_t at_high = d.footprint() - std::min(d.footprint(), e.a) + e.c;
          if (at_high > d.footprint_peak) d.footprint_peak = at_high;
        }
        break;
      }
    }
  }

  void finish() {
    // Grouped once: a scan of every live allocation per device was quadratic.
    std::map<uint32_t, std::vector<const Allocation*>> still_by_device;
    for (auto& [k, a] : p_.live) still_by_device[a.device].push_back(&a);
    for (auto& [k, h] : p_.vmm_handles) still_by_device[h.alloc.device].push_back(&h.alloc);
    for (auto& [index, d] : p_.devices) {
      d.live_at_peak = d.memory.live_at_peak(still_by_device[index]);
      std::sort(d.live_at_peak.begin(), d.live_at_peak.end(),
                [](const Allocation& a, const Allocation& b) {
                  return a.bytes != b.bytes ? a.bytes > b.bytes : a.seq < b.seq;
                });
    }
  }

 private:
  // Most events name the device of the event before: remember it (std::map nodes are stable).
  DeviceModel& device(uint32_t index) {
    if (last_device_ && last_device_->index == index) return *last_device_;
    auto [it, inserted] = p_.devices.try_emplace(index);
    if (inserted) it->second.index = index;
    last_device_ = &it->second;
    return it->second;
  }

  Allocation make(const Event& e, Api api) {
    Allocation a;
    a.id = e.address;
    a.api = api;
    a.device = e.device;
    a.bytes = e.bytes;
    a.time_ns = e.time_ns;
    a.seq = seq_;
    a.stream = e.stream;
    a.thread = e.thread;
    a.last_kernel = device(e.device).last_kernel;
    a.stack = pending_stack_;
    a.py_stack = pending_py_stack_;
    pending_stack_ = pending_py_stack_ = 0;
    return a;
  }

  void add_device(const Allocation& a, uint64_t now) {
    DeviceModel& d = device(a.device);
    uint64_t before = d.memory.peak_bytes();
    d.memory.add(a, now);
    if (is_async(a.api)) d.async_live += a.bytes;
    d.update_footprint(now);
    if (d.memory.peak_bytes() > before) d.kernel_at_peak = d.last_kernel;
    ++d.allocations;
    ApiStats& s = d.apis[idx(a.api)];
    ++s.calls;
    s.bytes += a.bytes;
    run_delta(a.device, now, static_cast<int64_t>(a.bytes));
  }

  void remove_device(const Allocation& a, uint64_t now) {
    DeviceModel& d = device(a.device);
    d.memory.remove(a, now);
    if (is_async(a.api)) d.async_live -= std::min(d.async_live, a.bytes);
    d.update_footprint(now);
    ++d.frees;
    run_delta(a.device, now, -static_cast<int64_t>(a.bytes));
  }

  void run_delta(uint32_t index, uint64_t now, int64_t delta) {
    RunDevice& rd = run_device(run_, where_, p_.host, index);
    // Unsigned arithmetic: sizes from a trace can reach 2^63, where int64_t overflows (UB).
    rd.live_bytes += static_cast<uint64_t>(delta);
    uint64_t& mine = rd.live_by_pid[p_.pid];
    mine += static_cast<uint64_t>(delta);
    if (rd.live_bytes > rd.peak_bytes) {
      rd.peak_bytes = rd.live_bytes;
      rd.peak_time_ns = now;
      rd.peak_by_pid = rd.live_by_pid;
    }
    rd.timeline.add(now, rd.live_bytes);
  }

  void on_alloc(const Event& e) {
    Allocation a = make(e, e.api);
    if (format::memory_kind(e.api) == format::MemoryKind::PinnedHost) {
      auto& prev = p_.live_host[e.address];
      if (prev.bytes) p_.pinned_host.remove(prev, e.time_ns);
      prev = a;
      p_.pinned_host.add(a, e.time_ns);
      ApiStats& s = p_.host_apis[idx(e.api)];
      ++s.calls;
      s.bytes += e.bytes;
      return;
    }
    uint64_t key = live_key(e.api, e.address);
    auto it = p_.live.find(key);
    if (it != p_.live.end()) {
      // Same address handed out again without a free we saw (a dropped event): the old one
      // cannot still be live.
      ++device(it->second.device).replaced_without_free;
      remove_device(it->second, e.time_ns);
      p_.live.erase(it);
    }
    p_.live.emplace(key, a);
    add_device(a, e.time_ns);
  }

  void on_free(const Event& e) {
    if (format::memory_kind(e.api) == format::MemoryKind::PinnedHost) {
      auto it = p_.live_host.find(e.address);
      ++p_.host_apis[idx(e.api)].calls;
      if (it == p_.live_host.end()) return;
      p_.pinned_host.remove(it->second, e.time_ns);
      ++p_.host_apis[idx(it->second.api)].frees;
      p_.live_host.erase(it);
      return;
    }
    DeviceModel& d = device(e.device);
    ++d.apis[idx(e.api)].calls;
    auto it = p_.live.find(live_key(e.api, e.address));
    if (it == p_.live.end()) {
      ++d.unmatched_frees;
      return;
    }
    ++device(it->second.device).apis[idx(it->second.api)].frees;
    remove_device(it->second, e.time_ns);
    p_.live.erase(it);
  }

  void on_failed(const Event& e) {
    const uint32_t stack = pending_stack_, py_stack = pending_py_stack_;
    pending_stack_ = pending_py_stack_ = 0;
    DeviceModel& d = device(e.device);
    ++d.apis[idx(e.api)].failed;
    constexpr uint64_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
    if (e.a != kOutOfMemory) {
      ++p_.failures_by_result[e.a];
      return;
    }
    OomEvent o;
    o.device = e.device;
    o.pid = p_.pid;
    o.requested_bytes = e.bytes;
    o.time_ns = e.time_ns;
    o.api = e.api;
    o.result = e.a;
    o.thread = e.thread;
    o.live_bytes = d.memory.live_bytes();
    o.last_kernel = p_.kernel_name(d.last_kernel);
    o.stack = stack;
    o.py_stack = py_stack;
    // Only the first OOMs keep their live set: a trace of many OOMs (a retry loop, a corrupt
    // or crafted file) must not cost OOMs x live allocations (250 KB of trace took 2 GiB).
    if (p_.ooms.size() < kOomsWithLiveSet) {
      for (auto& [k, a] : p_.live)
        if (a.device == e.device) o.live.push_back(a);
      for (auto& [k, h] : p_.vmm_handles)
        if (h.alloc.device == e.device) o.live.push_back(h.alloc);
      std::sort(o.live.begin(), o.live.end(),
                [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });
      if (o.live.size() > kOomLiveCap) o.live.resize(kOomLiveCap);
    }
    p_.ooms.push_back(std::move(o));
  }

  Run& run_;
  ProcessModel& p_;
  DeviceIndex& where_;  // run_.devices by (host, index), shared by the builders of a run
  uint64_t seq_ = 0;
  DeviceModel* last_device_ = nullptr;
  uint32_t pending_stack_ = 0, pending_py_stack_ = 0;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, size_t> module_index_;
};

}  // namespace

const std::string& ProcessModel::kernel_name(uint32_t id) const {
  static const std::string graph = "(graph launch)";
  static const std::string none;
  if (id == 0) return none;
  auto it = kernel_names.find(id);
  return it == kernel_names.end() ? none : it->second;
}

void Timeline::add(uint64_t t, uint64_t bytes) {
  if (!started_) {
    origin_ = t;
    started_ = true;
  }
  uint64_t start = origin_ + (t >= origin_ ? (t - origin_) / width_ * width_ : 0);
  if (!points_.empty() && points_.back().time_ns == start) {
    Point& p = points_.back();
    p.max_bytes = std::max(p.max_bytes, bytes);
    p.last_bytes = bytes;
    return;
  }
  points_.push_back({start, bytes, bytes});
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
        merged.back().max_bytes = std::max(merged.back().max_bytes, p.max_bytes);
        merged.back().last_bytes = p.last_bytes;
      } else {
        merged.push_back({start, p.max_bytes, p.last_bytes});
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
  for (const auto& path : trace_paths) readers.push_back(std::make_unique<TraceReader>(path));
  return analyze(std::move(readers));
}

Run analyze(std::vector<std::unique_ptr<TraceReader>> readers) {
  Run run;
  run.processes.resize(readers.size());
  std::vector<Builder> builders;
  builders.reserve(readers.size());
  Builder::DeviceIndex where;
  for (size_t i = 0; i < readers.size(); ++i) {
    run.processes[i].trace_path = readers[i]->name();
    builders.emplace_back(run, run.processes[i], where);
  }

  // k-way merge by time, so that the run-wide device totals see every process in order.
  // Records without a time (strings, notices) take the time of the record before them.
  struct Head {
    uint64_t time;
    size_t reader;
    bool operator>(const Head& o) const {
      return time != o.time ? time > o.time : reader > o.reader;
    }
  };
  std::vector<Event> pending(readers.size());
  std::vector<uint64_t> last_time(readers.size(), 0);
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  auto pull = [&](size_t i) {
    if (!readers[i]->next(pending[i])) return;
    if (pending[i].time_ns) last_time[i] = pending[i].time_ns;
    heads.push({last_time[i], i});
  };
  if (readers.size() == 1) {
    while (readers[0]->next(pending[0])) builders[0].apply(pending[0]);
  } else {
    for (size_t i = 0; i < readers.size(); ++i) pull(i);
  }
  while (!heads.empty()) {
    Head h = heads.top();
    heads.pop();
    builders[h.reader].apply(pending[h.reader]);
    pull(h.reader);
  }

  for (size_t i = 0; i < readers.size(); ++i) {
    builders[i].finish();
    ProcessModel& p = run.processes[i];
    if (readers[i]->partial()) {
      p.problem = readers[i]->problem();
      run.problems.push_back(readers[i]->name() + ": " + p.problem);
    }
    if (!p.has_process_record)
      run.problems.push_back(readers[i]->name() + ": no process record (empty stream)");
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
  return run;
}

}  // namespace vramtrace::collector

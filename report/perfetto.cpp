// The Chrome trace event JSON of report/perfetto.h, from the run's analysis (its figures are the
// model's and the analysis', as report.json has them; nothing is computed here). The Trace Event
// Format: "ph" C counters (each argument a series), X complete slices, i instants, M metadata
// naming processes and threads; "ts" and "dur" in microseconds.
#include "report/perfetto.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "collector/model/torch_memory.h"
#include "common/bytes_text.h"
#include "report/json_report.h"

namespace vramtrace::report {
namespace {

using nlohmann::json;

// The thread ids of a process group's tracks (a thread of NVTX ranges is kNvtxTid + its id).
constexpr int kIterationsTid = 1, kPhasesTid = 2, kOomTid = 3, kNvtxTid = 10;

struct Clock {
  uint64_t origin = 0;
  // Microseconds since the origin; a moment before it (a process's start before its first CUDA
  // work) is drawn at 0.
  double ts(uint64_t ns) const {
    return ns <= origin ? 0.0 : static_cast<double>(ns - origin) / 1000.0;
  }
  double dur(uint64_t start, uint64_t end) const {
    return end <= start ? 0.0 : ts(end) - ts(start);
  }
};

json metadata(const char* what, uint64_t pid, int64_t tid, const std::string& name) {
  json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

json counter(const std::string& name, uint64_t pid, double ts, json args) {
  return {{"ph", "C"}, {"name", name}, {"pid", pid}, {"tid", 0}, {"ts", ts}, {"args", args}};
}

json slice(const std::string& name, const char* cat, uint64_t pid, int64_t tid, double ts,
           double dur, json args) {
  return {{"ph", "X"},  {"name", name}, {"cat", cat}, {"pid", pid},
          {"tid", tid}, {"ts", ts},     {"dur", dur}, {"args", args}};
}

// A timeline's buckets as counter values in time order: each bucket's lowest and highest figure
// at the moments they were first reached, then its last figure at the bucket's end when it
// differs (the figure held until the next bucket's first event).
void put_timeline(json& out, const collector::Timeline& t, const std::string& name,
                  const char* series, uint64_t pid, const Clock& clock) {
  const auto& points = t.points();
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    std::vector<std::pair<uint64_t, uint64_t>> v = {{p.min_ns, p.min_bytes}};
    if (p.max_ns != p.min_ns || p.max_bytes != p.min_bytes) v.push_back({p.max_ns, p.max_bytes});
    std::sort(v.begin(), v.end());
    if (p.last_bytes != v.back().second) {
      uint64_t end = p.time_ns + t.bucket_ns();
      if (i + 1 < points.size()) end = std::min(end, points[i + 1].time_ns);
      v.push_back({std::max(end, v.back().first), p.last_bytes});
    }
    for (const auto& [ns, bytes] : v)
      out.push_back(counter(name, pid, clock.ts(ns), {{series, bytes}}));
  }
}

// PyTorch's categories over time (the analysis' series, adding up to the device's figure), one
// series per category that holds something at some moment.
void put_categories(json& out, const collector::TorchDevice& t, const std::string& name,
                    uint64_t pid, const Clock& clock) {
  std::vector<size_t> used;
  for (size_t c = 0; c < collector::kCategories; ++c)
    for (const auto& row : t.series)
      if (row[c]) {
        used.push_back(c);
        break;
      }
  for (size_t i = 0; i < t.times.size() && i < t.series.size(); ++i) {
    json args = json::object();
    for (size_t c : used)
      args[collector::category_key(static_cast<collector::Category>(c))] = t.series[i][c];
    out.push_back(counter(name, pid, clock.ts(t.times[i]), args));
  }
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void put_process(json& out, const collector::ProcessAnalysis& pa, uint64_t pid, size_t order,
                 const Clock& clock) {
  const collector::ProcessModel& p = *pa.model;
  std::string title = "pid " + std::to_string(p.pid);
  if (!p.exe.empty()) title += " " + base_name(p.exe);
  if (!p.host.empty()) title += " (" + p.host + ")";
  out.push_back(metadata("process_name", pid, -1, title));
  out.push_back({{"ph", "M"},
                 {"name", "process_sort_index"},
                 {"pid", pid},
                 {"args", {{"sort_index", order}}}});

  for (const auto& [index, da] : pa.devices) {
    const collector::DeviceModel& d = *da.model;
    const std::string gpu = "GPU " + std::to_string(index);
    put_timeline(out, d.memory.timeline, gpu + " memory in use", "bytes", pid, clock);
    if (da.torch && da.torch->classified && !da.torch->times.empty())
      put_categories(out, *da.torch, gpu + " memory by category", pid, clock);
  }

  if (!p.iterations.empty()) {
    out.push_back(metadata("thread_name", pid, kIterationsTid, "iterations"));
    for (size_t i = 0; i < p.iterations.size(); ++i) {
      const uint64_t start = p.iterations[i];
      const uint64_t end = i + 1 < p.iterations.size() ? p.iterations[i + 1] : p.end_ns;
      out.push_back(slice("iteration " + std::to_string(i), "iteration", pid, kIterationsTid,
                          clock.ts(start), clock.dur(start, end),
                          {{"iteration", i}, {"found_from", p.iteration_source}}));
    }
  }

  if (p.torch_memory && !p.torch_memory->phases().empty()) {
    const collector::TorchMemory& tm = *p.torch_memory;
    out.push_back(metadata("thread_name", pid, kPhasesTid, "PyTorch phases"));
    for (const auto& ph : tm.phases()) {
      const uint64_t end = ph.end_ns == UINT64_MAX ? std::max(p.end_ns, ph.start_ns) : ph.end_ns;
      json args = {{"iteration", ph.iteration}};
      if (ph.site) args["site"] = tm.site_text(ph.site);
      if (ph.end_ns == UINT64_MAX) args["open_at_end"] = true;
      out.push_back(slice(collector::phase_key(ph.phase), "phase", pid, kPhasesTid,
                          clock.ts(ph.start_ns), clock.dur(ph.start_ns, end), args));
    }
  }

  std::set<uint32_t> nvtx_threads;
  for (const auto& r : p.phases) {
    const int64_t tid = kNvtxTid + static_cast<int64_t>(r.thread);
    if (nvtx_threads.insert(r.thread).second)
      out.push_back(
          metadata("thread_name", pid, tid, "NVTX ranges, thread " + std::to_string(r.thread)));
    out.push_back(slice(p.kernel_name(r.name), "nvtx", pid, tid, clock.ts(r.start_ns),
                        clock.dur(r.start_ns, r.end_ns), {{"depth", r.depth}}));
  }

  if (!p.ooms.empty()) out.push_back(metadata("thread_name", pid, kOomTid, "OOMs"));
  for (const auto& o : p.ooms) {
    json args = {{"device", o.device},
                 {"requested_bytes", o.requested_bytes},
                 {"api", format::api_name(o.api)},
                 {"live_bytes", o.live_bytes},
                 {"fatal", o.fatal},
                 {"recovered", o.recovered},
                 {"allocator", o.allocator}};
    if (o.allocator) args["allocator_request_bytes"] = o.allocator_request;
    if (o.free_bytes) args["free_bytes"] = *o.free_bytes;
    if (o.total_bytes) args["total_bytes"] = *o.total_bytes;
    if (!o.last_kernel.empty()) args["last_kernel"] = demangle(o.last_kernel);
    out.push_back({{"ph", "i"},
                   {"s", "t"},
                   {"name", "OOM: " + human_bytes(o.requested_bytes) + " requested on GPU " +
                                std::to_string(o.device)},
                   {"cat", "oom"},
                   {"pid", pid},
                   {"tid", kOomTid},
                   {"ts", clock.ts(o.time_ns)},
                   {"args", args}});
  }
}

}  // namespace

json perfetto_trace(const collector::RunAnalysis& a) {
  const collector::Run& run = *a.run;
  Clock clock{a.cuda_start_ns ? a.cuda_start_ns : run.origin_ns};
  json events = json::array();
  // Each process its own group, by its pid (another number where two processes share one: two
  // hosts, or a pid reused).
  std::set<uint64_t> pids;
  for (size_t i = 0; i < a.processes.size(); ++i) {
    uint64_t pid = a.processes[i].model->pid;
    while (!pids.insert(pid).second) pid += 1u << 22;
    put_process(events, a.processes[i], pid, i + 1, clock);
  }
  // Several processes: the devices as the whole run used them, in a group of their own first.
  if (a.processes.size() > 1) {
    uint64_t pid = 0;
    while (!pids.insert(pid).second) ++pid;
    events.push_back(metadata("process_name", pid, -1, "run: every process"));
    events.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", 0}}}});
    for (const auto& d : run.devices) {
      std::string name = "GPU " + std::to_string(d.index);
      if (!d.host.empty()) name += " (" + d.host + ")";
      put_timeline(events, d.timeline, name + " memory in use", "bytes", pid, clock);
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"tool", "vramtrace"},
            {"version", VRAMTRACE_VERSION},
            {"clock", "microseconds from the run's first CUDA work"}}}};
}

}  // namespace vramtrace::report

// Rendering the collector's model as report.json (see json_report.h).
#include "report/json_report.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "common/format.h"

namespace vramtrace::report {

using collector::Allocation;
using collector::ProcessModel;
using collector::Run;
using nlohmann::json;

namespace {

constexpr size_t kTopAllocations = 50;
constexpr size_t kTopKernels = 20;

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Until native and Python stacks exist, a site is the driver entry point that made it.
std::string site_of(const Allocation& a) { return format::api_name(a.api); }

json api_table(const std::array<collector::ApiStats, static_cast<size_t>(format::Api::kCount)>& t) {
  json out = json::object();
  for (size_t i = 1; i < t.size(); ++i) {
    const auto& s = t[i];
    if (!s.calls && !s.frees && !s.failed) continue;
    out[format::api_name(static_cast<format::Api>(i))] = {
        {"calls", s.calls}, {"bytes", s.bytes}, {"freed", s.frees}, {"failed", s.failed}};
  }
  return out;
}

json allocation_json(const Allocation& a, const ProcessModel& p, uint64_t origin) {
  json j = {{"address", hex(a.id)},
            {"bytes", a.bytes},
            {"api", format::api_name(a.api)},
            {"kind", format::memory_kind_name(format::memory_kind(a.api))},
            {"time_ns", a.time_ns >= origin ? a.time_ns - origin : 0},
            {"thread", a.thread},
            {"site", site_of(a)}};
  if (a.stream) j["stream"] = hex(a.stream);
  const std::string& k = p.kernel_name(a.last_kernel);
  if (!k.empty()) j["last_kernel"] = demangle(k);
  return j;
}

// Groups allocations by site: bytes, count and the distinct sizes, largest site first.
json by_site(const std::vector<Allocation>& allocs) {
  struct Group {
    uint64_t bytes = 0, count = 0;
    std::map<uint64_t, uint64_t> sizes;
  };
  std::map<std::string, Group> groups;
  for (const auto& a : allocs) {
    Group& g = groups[site_of(a)];
    g.bytes += a.bytes;
    ++g.count;
    ++g.sizes[a.bytes];
  }
  std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(),
            [](auto& a, auto& b) { return a.second.bytes > b.second.bytes; });
  json out = json::array();
  for (auto& [site, g] : sorted) {
    json sizes = json::array();
    for (auto it = g.sizes.rbegin(); it != g.sizes.rend(); ++it)
      sizes.push_back({{"bytes", it->first}, {"count", it->second}});
    out.push_back({{"site", site}, {"bytes", g.bytes}, {"count", g.count}, {"sizes", sizes}});
  }
  return out;
}

json timeline_json(const collector::Timeline& t, uint64_t origin) {
  json points = json::array();
  for (const auto& p : t.points())
    points.push_back({p.time_ns >= origin ? p.time_ns - origin : 0, p.max_bytes, p.last_bytes});
  return {{"bucket_ns", t.bucket_ns()}, {"columns", {"time_ns", "max_bytes", "last_bytes"}},
          {"points", points}};
}

json pools_json(const collector::DeviceModel& d) {
  json out = json::array();
  for (const auto& [handle, p] : d.pools)
    out.push_back({{"pool", hex(handle)},
                   {"reserved_bytes", p.reserved},
                   {"used_bytes", p.used},
                   {"peak_reserved_bytes", p.peak_reserved}});
  return out;
}

std::string iso_time_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

json to_json(const Run& run, const RunInfo& info) {
  const uint64_t origin = run.origin_ns;
  json report;
  report["schema"] = kSchema;
  report["tool"] = {{"name", "vramtrace"}, {"version", VRAMTRACE_VERSION}};
  report["generated_at"] = iso_time_now();

  json run_j;
  run_j["stand_in"] = run.stand_in;
  if (run.stand_in)
    run_j["stand_in_note"] =
        "recorded on the CPU stand-in for CUDA (tests/demo), not on a real GPU";
  if (!info.command.empty()) run_j["command"] = info.command;
  if (info.exit_code) run_j["exit_code"] = *info.exit_code;
  if (info.signal) run_j["signal"] = *info.signal;
  bool complete = !info.signal;  // a command killed by a signal did not run to its end
  for (const auto& p : run.processes)
    if (!p.clean_exit || !p.problem.empty()) complete = false;
  run_j["complete"] = complete;
  run_j["problems"] = run.problems;
  uint64_t dropped = 0, events = 0, end = origin;
  for (const auto& p : run.processes) {
    dropped += p.dropped_events;
    events += p.events;
    end = std::max(end, p.end_ns);
  }
  run_j["events"] = events;
  run_j["dropped_events"] = dropped;
  run_j["duration_ns"] = end - origin;
  report["run"] = run_j;

  // Processes first: the run-wide devices refer to them.
  json processes = json::array();
  json ooms = json::array();
  json leaks = json::array();
  std::map<std::pair<std::string, uint32_t>, uint64_t> final_by_device;
  std::map<std::pair<std::string, uint32_t>, json> peak_allocs_by_device;
  std::map<std::pair<std::string, uint32_t>, json> apis_by_device;
  std::map<std::pair<std::string, uint32_t>, json> reserved_by_device;
  for (const auto& p : run.processes) {
    json pj;
    pj["pid"] = p.pid;
    pj["ppid"] = p.ppid;
    pj["host"] = p.host;
    pj["exe"] = p.exe;
    pj["cmdline"] = p.cmdline;
    json ranks = json::object();
    for (auto& [k, v] : p.ranks) ranks[k] = v;
    pj["ranks"] = ranks;
    pj["trace"] = p.trace_path;
    pj["start_realtime_ns"] = p.start_realtime_ns;
    pj["start_ns"] = p.start_ns >= origin ? p.start_ns - origin : 0;
    pj["end_ns"] = p.end_ns >= origin ? p.end_ns - origin : 0;
    pj["clean_exit"] = p.clean_exit;
    pj["cut_short"] = !p.clean_exit;
    if (!p.problem.empty()) pj["problem"] = p.problem;
    pj["events"] = p.events;
    pj["dropped_events"] = p.dropped_events;
    pj["notices"] = p.notices;

    json devices = json::array();
    std::map<uint32_t, std::vector<Allocation>> still_by_device;  // once, not once per device
    for (const auto& [k, a] : p.live) still_by_device[a.device].push_back(a);
    for (const auto& [k, h] : p.vmm_handles) still_by_device[h.alloc.device].push_back(h.alloc);
    for (const auto& [index, d] : p.devices) {
      std::vector<Allocation>& still = still_by_device[index];
      std::sort(still.begin(), still.end(),
                [](const Allocation& a, const Allocation& b) { return a.bytes > b.bytes; });

      json top = json::array();
      for (size_t i = 0; i < d.live_at_peak.size() && i < kTopAllocations; ++i)
        top.push_back(allocation_json(d.live_at_peak[i], p, origin));

      json kernels = json::array();
      std::vector<std::pair<uint32_t, uint64_t>> ks(d.launches_by_kernel.begin(),
                                                    d.launches_by_kernel.end());
      std::sort(ks.begin(), ks.end(), [](auto& a, auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      for (size_t i = 0; i < ks.size() && i < kTopKernels; ++i) {
        const std::string& n = p.kernel_name(ks[i].first);
        kernels.push_back({{"name", ks[i].first == 0 ? "(graph launch)" : demangle(n)},
                           {"mangled", n},
                           {"launches", ks[i].second}});
      }

      json dj = {
          {"index", index},
          {"name", d.name},
          {"uuid", d.uuid},
          {"total_bytes", d.total_bytes},
          {"peak",
           {{"bytes", d.memory.peak_bytes()},
            {"time_ns", d.memory.peak_time() >= origin ? d.memory.peak_time() - origin : 0},
            {"live_allocations", d.live_at_peak.size()},
            {"by_site", by_site(d.live_at_peak)},
            {"largest", top},
            {"last_kernel", demangle(p.kernel_name(d.kernel_at_peak))}}},
          {"reserved",
           {{"peak_bytes", d.footprint_peak},
            {"peak_time_ns", d.footprint_peak_time >= origin ? d.footprint_peak_time - origin : 0},
            {"note", "device memory this process held: allocations, plus what stream-ordered "
                     "pools reserved beyond their allocations"}}},
          {"pools", pools_json(d)},
          {"final_live_bytes", d.memory.live_bytes()},
          {"final_live_allocations", still.size()},
          {"allocations", d.allocations},
          {"frees", d.frees},
          {"unmatched_frees", d.unmatched_frees},
          {"replaced_without_free", d.replaced_without_free},
          {"apis", api_table(d.apis)},
          {"launches", {{"count", d.launches}, {"distinct_kernels", d.launches_by_kernel.size()},
                        {"top", kernels}}},
          {"timeline", timeline_json(d.memory.timeline, origin)},
      };
      devices.push_back(dj);
      auto key = std::make_pair(p.host, index);
      final_by_device[key] += d.memory.live_bytes();
      peak_allocs_by_device[key] = dj["peak"];
      apis_by_device[key] = dj["apis"];
      reserved_by_device[key] = dj["reserved"];

      // Leak suspects: device memory still live when the process ended, grouped by site.
      for (json& g : by_site(still)) {
        g["device"] = index;
        g["pid"] = p.pid;
        leaks.push_back(g);
      }
    }
    pj["devices"] = devices;

    json host = {{"peak_bytes", p.pinned_host.peak_bytes()},
                 {"final_live_bytes", p.pinned_host.live_bytes()},
                 {"apis", api_table(p.host_apis)}};
    pj["pinned_host"] = host;

    json failures = json::array();
    for (auto& [result, count] : p.failures_by_result)
      failures.push_back({{"error", result}, {"count", count}});
    pj["failed_allocations"] = failures;

    json pooms = json::array();
    for (const auto& o : p.ooms) {
      std::vector<Allocation> live = o.live;
      json largest = json::array();
      for (size_t i = 0; i < live.size() && i < 10; ++i)
        largest.push_back(allocation_json(live[i], p, origin));
      json oj = {{"device", o.device},
                 {"pid", o.pid},
                 {"requested_bytes", o.requested_bytes},
                 {"time_ns", o.time_ns >= origin ? o.time_ns - origin : 0},
                 {"api", format::api_name(o.api)},
                 {"error", "CUDA_ERROR_OUT_OF_MEMORY"},
                 {"thread", o.thread},
                 {"live_bytes", o.live_bytes},
                 {"live_by_site", by_site(live)},
                 {"largest_live", largest}};
      if (o.live.empty() && o.live_bytes) oj["live_set_omitted"] = true;  // after 64 OOMs
      if (o.free_bytes) oj["free_bytes"] = *o.free_bytes;
      if (o.total_bytes) oj["total_bytes"] = *o.total_bytes;
      if (!o.last_kernel.empty()) oj["last_kernel"] = demangle(o.last_kernel);
      pooms.push_back(oj);
      ooms.push_back(oj);
    }
    pj["oom"] = pooms;
    processes.push_back(pj);
  }

  json devices = json::array();
  for (const auto& d : run.devices) {
    auto key = std::make_pair(d.host, d.index);
    json by_pid = json::array();
    for (auto& [pid, bytes] : d.peak_by_pid)
      if (bytes) by_pid.push_back({{"pid", pid}, {"bytes", bytes}});
    json dj = {{"index", d.index},
               {"host", d.host},
               {"name", d.name},
               {"uuid", d.uuid},
               {"total_bytes", d.total_bytes},
               {"peak",
                {{"bytes", d.peak_bytes},
                 {"time_ns", d.peak_time_ns >= origin ? d.peak_time_ns - origin : 0},
                 {"by_process", by_pid}}},
               {"final_live_bytes", final_by_device[key]},
               {"timeline", timeline_json(d.timeline, origin)}};
    if (d.total_bytes)
      dj["peak"]["fraction_of_capacity"] =
          static_cast<double>(d.peak_bytes) / static_cast<double>(d.total_bytes);
    // With one process the process's view of the peak is the device's: show it here too.
    if (d.peak_by_pid.size() <= 1 && peak_allocs_by_device.count(key)) {
      const json& pp = peak_allocs_by_device[key];
      dj["peak"]["live_allocations"] = pp["live_allocations"];
      dj["peak"]["by_site"] = pp["by_site"];
      dj["peak"]["largest"] = pp["largest"];
      dj["peak"]["last_kernel"] = pp["last_kernel"];
      dj["apis"] = apis_by_device[key];
      dj["reserved"] = reserved_by_device[key];
    }
    devices.push_back(dj);
  }
  report["devices"] = devices;
  report["processes"] = processes;
  report["oom"] = ooms;
  std::stable_sort(leaks.begin(), leaks.end(), [](const json& a, const json& b) {
    return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
  });
  report["leaks"] = leaks;
  return report;
}

std::string summary_text(const json& r) {
  std::string out;
  char line[512];
  if (r["run"].value("stand_in", false))
    out += "vramtrace: NOTE: recorded on the CPU stand-in for CUDA, not on a real GPU\n";
  if (r["devices"].empty()) out += "vramtrace: no CUDA device memory was used\n";
  for (const auto& d : r["devices"]) {
    uint64_t peak = d["peak"]["bytes"].get<uint64_t>();
    uint64_t total = d["total_bytes"].get<uint64_t>();
    double at_s = static_cast<double>(d["peak"]["time_ns"].get<uint64_t>()) / 1e9;
    std::snprintf(line, sizeof line, "vramtrace: device %u (%s): peak %s", d["index"].get<unsigned>(),
                  d["name"].get<std::string>().c_str(), human_bytes(peak).c_str());
    out += line;
    if (total) {
      std::snprintf(line, sizeof line, " of %s (%.1f%%)", human_bytes(total).c_str(),
                    100.0 * static_cast<double>(peak) / static_cast<double>(total));
      out += line;
    }
    std::snprintf(line, sizeof line, " at %.3f s; %s still live at the end\n", at_s,
                  human_bytes(d["final_live_bytes"].get<uint64_t>()).c_str());
    out += line;
  }
  for (const auto& o : r["oom"]) {
    std::snprintf(line, sizeof line,
                  "vramtrace: OUT OF MEMORY on device %u: %s requested with %s live (pid %llu)\n",
                  o["device"].get<unsigned>(),
                  human_bytes(o["requested_bytes"].get<uint64_t>()).c_str(),
                  human_bytes(o["live_bytes"].get<uint64_t>()).c_str(),
                  static_cast<unsigned long long>(o["pid"].get<uint64_t>()));
    out += line;
  }
  uint64_t leak_bytes = 0, leak_count = 0;
  for (const auto& l : r["leaks"]) {
    leak_bytes += l["bytes"].get<uint64_t>();
    leak_count += l["count"].get<uint64_t>();
  }
  if (leak_count) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu allocation(s), %s, still live at exit (leak suspects)\n",
                  static_cast<unsigned long long>(leak_count), human_bytes(leak_bytes).c_str());
    out += line;
  }
  if (r["run"]["dropped_events"].get<uint64_t>()) {
    std::snprintf(line, sizeof line, "vramtrace: WARNING: %llu events were dropped (buffer full)\n",
                  static_cast<unsigned long long>(r["run"]["dropped_events"].get<uint64_t>()));
    out += line;
  }
  for (const auto& p : r["run"]["problems"])
    out += "vramtrace: WARNING: " + p.get<std::string>() + "\n";
  return out;
}

}  // namespace vramtrace::report

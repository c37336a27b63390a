// Rendering the run's analysis (collector/analysis/analysis.h) as report.json (see json_report.h):
// the JSON's shape is decided here; every figure, grouping and order is the analysis'.
#include "report/json_report.h"
#include "report/report_keys.h"
#include "report/torch_json.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "collector/analysis/stacks.h"
#include "common/format.h"

namespace vramtrace::report {

using collector::Allocation;
using collector::ProcessModel;
using collector::Run;
using nlohmann::json;

namespace {

constexpr const char* kLaunchesNotRecorded =
    "kernel launches were not recorded (--launches=off, VRAMTRACE_LAUNCHES=off): launch counts, "
    "the kernel at the peak and iterations found by the launch rhythm are unknown";
constexpr const char* kLaunchesStoppedByHook =
    "kernel launches were recorded until stopped_ns only: PyTorch's start-up hook marks this "
    "process's iterations and phases, and the launch callbacks, the largest cost on a "
    "launch-bound step, were switched off after its second iteration; launch counts and the last "
    "kernel before an allocation or an OOM after then are unknown (vramtrace run --launches=on "
    "records them all)";
constexpr const char* kLaunchesStoppedByProgram =
    "kernel launches were recorded until stopped_ns only: the program stopped their recording "
    "(vramtrace_stop_launches()); launch counts and the last kernel before an allocation or an "
    "OOM after then are unknown";

// Whether the kernel launched last before time `t` was recorded.
bool kernel_known_at(const ProcessModel& p, uint64_t t) {
  return p.launches_recorded && (!p.launches_stopped_ns || t < p.launches_stopped_ns);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A time of the trace's clock as report.json has it: from the run's origin.
uint64_t since(uint64_t ns, uint64_t origin) { return ns >= origin ? ns - origin : 0; }

json frames_json(const collector::Attribution* a) {
  json out = json::array();
  if (!a) return out;
  for (const auto& f : a->frames) {
    json j = {{"function", f.function}, {"file", f.file}, {"line", f.line}};
    if (f.internal) j["internal"] = true;  // CUDA runtime, driver, CUPTI or vramtrace itself
    j["class"] = collector::frame_class_name(f.cls);
    if (!f.op.empty()) j["operator"] = f.op;
    if (f.python) {
      j["python"] = true;
    } else {
      j[field::module] = f.module;
      j["offset"] = hex(f.offset);
    }
    out.push_back(j);
  }
  return out;
}

json api_table(const std::array<collector::ApiStats, static_cast<size_t>(format::Api::kCount)>& t) {
  json out = json::object();
  for (size_t i = 1; i < t.size(); ++i) {
    const auto& s = t[i];
    if (!s.calls && !s.frees && !s.failed) continue;
    out[format::api_name(static_cast<format::Api>(i))] = {
        {"calls", s.calls}, {field::bytes, s.bytes}, {"freed", s.frees}, {"failed", s.failed}};
  }
  return out;
}

json allocation_json(const collector::LiveAllocation& live, const ProcessModel& p,
                     uint64_t origin) {
  const Allocation& a = *live.allocation;
  json j = {{"address", hex(a.id)},
            {field::bytes, a.bytes},
            {"api", format::api_name(a.api)},
            {field::kind, format::memory_kind_name(format::memory_kind(a.api))},
            {field::time_ns, since(a.time_ns, origin)},
            {"thread", a.thread},
            {field::site, live.site.text},
            {field::library, live.site.library},
            {"stack", frames_json(live.site.stack)}};
  if (a.stream) j["stream"] = hex(a.stream);
  const std::string& k = p.kernel_name(a.last_kernel);
  if (!k.empty()) j["last_kernel"] = demangle(k);
  if (a.phase) j[field::phase] = p.kernel_name(a.phase);
  if (a.space == 1) j[field::kind] = "pool block";
  return j;
}

json fragmentation_json(const collector::FragmentationState& f, uint64_t origin) {
  return {{"reserved_bytes", f.reserved},
          {"in_use_bytes", f.in_use},
          {"free_bytes", f.free_bytes()},
          {"free_blocks", f.free_blocks},
          {"largest_free_block_bytes", f.largest_free},
          {"external_fragmentation", f.external()},
          {"fragmentation_level",
           collector::fragmentation_level_name(collector::fragmentation_level(f.external()))},
          {"blocks", f.blocks},
          {"segments", f.segments},
          {field::time_ns, since(f.time_ns, origin)}};
}

// A site's growth (collector/analysis/leaks.h), its library and stack from one of its allocations.
json growth_json(const collector::SiteGrowth& g, const collector::Site& site, uint64_t origin) {
  json j = {{field::site, g.site},
            {field::library, site.library},
            {field::bytes, g.bytes},
            {field::bytes_per_iteration, g.bytes_per_iteration},
            {field::iterations, g.iterations},
            {"first_iteration", g.first_iteration},
            {"last_iteration", g.last_iteration},
            {"since_ns", since(g.since_ns, origin)},
            {"stack", frames_json(site.stack)}};
  if (!g.seen_at.empty()) j["seen_at"] = g.seen_at;
  return j;
}

json growth_json(const collector::GrowthAtSite& g, uint64_t origin) {
  return growth_json(g.growth, g.site, origin);
}

// The ranked findings of an OOM (collector/analysis/oom_findings.h), rendered.
json findings_json(const std::vector<collector::OomFindingAtSites>& findings, uint64_t origin) {
  json out = json::array();
  for (const auto& [f, growth_sites] : findings) {
    const auto& e = f.evidence;
    json ev = json::object();
    auto put = [&](const char* key, const auto& v) {
      if (v) ev[key] = *v;
    };
    put(field::requested_bytes, e.requested_bytes);
    put(field::live_bytes, e.live_bytes);
    put("limit_bytes", e.limit_bytes);
    put(field::total_bytes, e.total_bytes);
    put("device_free_bytes", e.device_free_bytes);
    put("free_reserved_bytes", e.free_reserved_bytes);
    put("largest_free_block_bytes", e.largest_free_block_bytes);
    put("free_blocks", e.free_blocks);
    put("external_fragmentation", e.external_fragmentation);
    put("held_by_others_bytes", e.held_by_others_bytes);
    put("free_bytes", e.free_bytes);
    put("this_process_bytes", e.this_process_bytes);
    put(field::bytes_per_iteration, e.bytes_per_iteration);
    put("grown_bytes", e.grown_bytes);
    put(field::iterations, e.iterations);
    if (e.since_ns) ev["since_ns"] = since(*e.since_ns, origin);
    if (f.kind == collector::FindingKind::Growth) {
      json sites = json::array();
      for (size_t i = 0; i < e.growth_sites.size(); ++i)
        sites.push_back(growth_json(e.growth_sites[i], growth_sites[i], origin));
      ev["sites"] = sites;
    }
    if (!e.kept_modules.empty()) {
      json mods = json::array();
      for (const auto& [module, bytes] : e.kept_modules)
        mods.push_back({{field::module, module}, {field::bytes, bytes}});
      ev["modules"] = mods;
    }
    if (f.kind == collector::FindingKind::NearCapacity) {
      json sites = json::array();
      for (const auto& [site, bytes] : e.top_sites)
        sites.push_back({{field::site, site}, {field::bytes, bytes}});
      ev["top_sites"] = sites;
    }
    // The same evidence as it is shown (collector::evidence_items: labels and typed figures),
    // for the page.
    json shown = json::array();
    for (const collector::EvidenceItem& item : collector::evidence_items(f)) {
      json j = {{"label", item.label}};
      if (item.bytes) j[field::bytes] = *item.bytes;
      if (item.count) j[field::count] = *item.count;
      if (item.fraction) j["fraction"] = *item.fraction;
      if (item.time_ns) j["time_ns"] = since(*item.time_ns, origin);
      if (!item.sites.empty()) {
        json sites = json::array();
        for (const auto& [name, bytes] : item.sites)
          sites.push_back({{field::name, name}, {field::bytes, bytes}});
        j["sites"] = sites;
      }
      shown.push_back(j);
    }
    out.push_back({{field::kind, collector::finding_kind_name(f.kind)},
                   {"score", f.score},
                   {field::title, f.title},
                   {"evidence", ev},
                   {"evidence_shown", shown},
                   {"suggestion", f.suggestion},
                   {field::rank, f.rank}});
  }
  return out;
}

// A live set's groups (collector/analysis/live_set.h): by site with the distinct sizes, by library,
// by whole stack.
json site_group_json(const collector::SiteGroup& g) {
  json sizes = json::array();
  for (const auto& [bytes, count] : g.sizes)
    sizes.push_back({{field::bytes, bytes}, {field::count, count}});
  return {{field::site, g.site}, {field::bytes, g.bytes},     {field::count, g.count},
          {"sizes", sizes},      {field::library, g.library}, {"stack", frames_json(g.stack)}};
}

json by_site(const std::vector<collector::SiteGroup>& groups) {
  json out = json::array();
  for (const auto& g : groups) out.push_back(site_group_json(g));
  return out;
}

json by_library(const std::vector<collector::LibraryGroup>& groups) {
  json out = json::array();
  for (const auto& g : groups)
    out.push_back({{field::library, g.library}, {field::bytes, g.bytes}, {field::count, g.count}});
  return out;
}

json by_stack(const std::vector<collector::StackGroup>& groups) {
  json out = json::array();
  for (const auto& g : groups)
    out.push_back({{field::site, g.site},
                   {field::library, g.library},
                   {field::bytes, g.bytes},
                   {field::count, g.count},
                   {"stack", frames_json(g.stack)}});
  return out;
}

json timeline_json(const collector::Timeline& t, uint64_t origin) {
  json points = json::array();
  const auto since = [origin](uint64_t ns) { return ns >= origin ? ns - origin : 0; };
  for (const auto& p : t.points())
    points.push_back({since(p.time_ns), p.max_bytes, p.last_bytes, p.min_bytes, since(p.max_ns),
                      since(p.min_ns)});
  return {{"bucket_ns", t.bucket_ns()},
          {"columns",
           {"time_ns", "max_bytes", "last_bytes", "min_bytes", "max_time_ns", "min_time_ns"}},
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

// What was live at a peak: how many allocations, by site, library and stack, and the largest.
void put_live_set(json& peak, const collector::LiveSet& s, size_t live_allocations, json largest) {
  peak["live_allocations"] = live_allocations;
  peak[field::by_site] = by_site(s.by_site);
  peak[field::by_library] = by_library(s.by_library);
  peak["by_stack"] = by_stack(s.by_stack);
  peak["largest"] = std::move(largest);
}

// A process's view of its device's peak: the figure, its moment, the live set, the kernel then
// and the NVTX ranges open.
json process_peak_json(const ProcessModel& p, const collector::DeviceAnalysis& da,
                       uint64_t origin) {
  const collector::DeviceModel& d = *da.model;
  json top = json::array();
  for (const auto& live : da.peak.largest) top.push_back(allocation_json(live, p, origin));
  json peak = {{field::bytes, d.memory.peak_bytes()},
               {field::time_ns, since(d.memory.peak_time(), origin)}};
  put_live_set(peak, da.peak, d.live_at_peak.size(), std::move(top));
  // Launches not recorded (--launches=off, or stopped before the peak) are unknown, not 0: no
  // kernel at the peak.
  if (kernel_known_at(p, d.memory.peak_time()))
    peak["last_kernel"] = demangle(p.kernel_name(d.kernel_at_peak));
  if (!d.phase_at_peak.empty()) {
    std::string path;
    for (uint32_t n : d.phase_at_peak) path += (path.empty() ? "" : " > ") + p.kernel_name(n);
    peak[field::phase] = path;
  }
  return peak;
}

json reserved_json(const collector::DeviceModel& d, uint64_t origin) {
  json j = {{field::peak_bytes, d.footprint_peak},
            {"peak_time_ns", since(d.footprint_peak_time, origin)},
            {"note",
             "device memory this process held: allocations, plus what stream-ordered "
             "pools reserved beyond their allocations"}};
  if (d.footprint_peak != d.memory.peak_bytes())
    j["timeline"] = timeline_json(d.footprint_timeline, origin);
  return j;
}

// The launches on a device: how many, the kernels launched most, and over time.
json launches_json(const ProcessModel& p, const collector::DeviceAnalysis& da, uint64_t origin) {
  const collector::DeviceModel& d = *da.model;
  if (!p.launches_recorded) return {{field::recorded, false}};
  json kernels = json::array();
  for (const auto& [id, launches] : da.top_kernels) {
    const std::string& n = p.kernel_name(id);
    kernels.push_back({{field::name, id == 0 ? "(graph launch)" : demangle(n)},
                       {"mangled", n},
                       {field::launches, launches}});
  }
  json j = {{field::recorded, true},
            {field::count, d.launches},
            {"distinct_kernels", d.launches_by_kernel.distinct()},
            {"top", kernels},
            // Cumulative launch count per bucket: the page draws launches per bucket from it.
            {"timeline", timeline_json(d.launch_timeline, origin)}};
  // Counted until then only (the process's launches note says why).
  if (p.launches_stopped_ns) j["stopped_ns"] = since(p.launches_stopped_ns, origin);
  return j;
}

// The sub-allocators' view of a device (collector/model/allocator_view.h): their pools' free memory
// now, at the peak and at its most, over time, and each pool's own.
json allocator_json(const ProcessModel& p, uint32_t index, const collector::DeviceModel& d,
                    uint64_t origin) {
  json av = {{"now", fragmentation_json(d.frag, origin)},
             {"most_free", fragmentation_json(d.frag_most_free, origin)},
             {"peak_in_use_bytes", d.allocator_peak_in_use},
             {"peak_in_use_time_ns", since(d.allocator_peak_time, origin)},
             {"free_timeline", timeline_json(d.frag_free_timeline, origin)},
             {"largest_free_timeline", timeline_json(d.frag_largest_timeline, origin)}};
  if (d.frag_at_peak) av[field::at_peak] = fragmentation_json(*d.frag_at_peak, origin);
  json pools = json::array();
  for (auto& [id, pool] : p.user_pools)
    if (pool.device == index)
      pools.push_back({{field::name, pool.name},
                       {"peak_reserved_bytes", pool.peak_reserved},
                       {"peak_in_use_bytes", pool.peak_in_use},
                       {"ooms", pool.ooms},
                       {"final", fragmentation_json(pool.view.state(), origin)}});
  av["pools"] = pools;
  return av;
}

json process_device_json(const ProcessModel& p, uint32_t index, const collector::DeviceAnalysis& da,
                         uint64_t origin) {
  const collector::DeviceModel& d = *da.model;
  json dj = {
      {field::index, index},
      {field::name, d.name},
      {"uuid", d.uuid},
      {field::total_bytes, d.total_bytes},
      {field::peak, process_peak_json(p, da, origin)},
      {"reserved", reserved_json(d, origin)},
      {"pools", pools_json(d)},
      {field::final_live_bytes, d.memory.live_bytes()},
      {"final_live_allocations", da.final_live_allocations},
      {"allocations", d.allocations},
      {"frees", d.frees},
      {"unmatched_frees", d.unmatched_frees},
      {"replaced_without_free", d.replaced_without_free},
      {"apis", api_table(d.apis)},
      {"timeline", timeline_json(d.memory.timeline, origin)},
      {field::launches, launches_json(p, da, origin)},
  };
  if (da.torch) add_torch_device(dj, p, *da.torch, origin);
  if (da.model_state_bytes) dj["model_state_at_exit_bytes"] = da.model_state_bytes;
  if (da.cuda_graph_bytes) dj["cuda_graph_blocks_at_exit_bytes"] = da.cuda_graph_bytes;
  if (da.library_workspace_bytes)
    dj["library_workspaces_at_exit_bytes"] = da.library_workspace_bytes;
  if (d.has_allocator_view) {
    dj["allocator"] = allocator_json(p, index, d, origin);
    if (da.retained_segment_bytes) dj["retained_segment_bytes"] = da.retained_segment_bytes;
  }
  return dj;
}

json oom_json(const ProcessModel& p, const collector::OomAnalysis& oa, uint64_t origin) {
  const collector::OomEvent& o = *oa.event;
  json largest = json::array();
  for (const auto& live : oa.live.largest) largest.push_back(allocation_json(live, p, origin));
  json oj = {{field::device, o.device},
             {field::pid, o.pid},
             {field::requested_bytes, o.requested_bytes},
             {field::time_ns, since(o.time_ns, origin)},
             {"api", format::api_name(o.api)},
             {"error", "CUDA_ERROR_OUT_OF_MEMORY"},
             {"thread", o.thread},
             {field::live_bytes, o.live_bytes},
             {field::site, oa.site.text},
             {field::library, oa.site.library},
             {"stack", frames_json(oa.site.stack)},
             {"live_by_site", by_site(oa.live.by_site)},
             {"live_by_library", by_library(oa.live.by_library)},
             {"largest_live", largest}};
  if (o.live.empty() && o.live_bytes) oj["live_set_omitted"] = true;  // after 64 OOMs
  if (o.free_bytes) oj["free_bytes"] = *o.free_bytes;
  if (o.total_bytes) oj[field::total_bytes] = *o.total_bytes;
  if (oa.held_by_others) oj["held_by_others_bytes"] = *oa.held_by_others;
  if (!o.last_kernel.empty()) oj["last_kernel"] = demangle(o.last_kernel);
  if (o.allocator) {
    oj["allocator"] = {{"pool", o.pool}, {field::requested_bytes, o.allocator_request}};
    if (o.api == format::Api::Unknown) oj["api"] = "pool " + o.pool;
  }
  if (o.fragmentation) oj["fragmentation"] = fragmentation_json(*o.fragmentation, origin);
  oj["driver_attempts"] = o.driver_attempts;
  if (o.recovered) oj[field::recovered] = true;
  if (!oa.growth.empty()) {
    json growth_then = json::array();
    for (const auto& g : oa.growth) growth_then.push_back(growth_json(g, origin));
    oj[field::growth] = growth_then;
  }
  add_torch_oom(oj, o, oa.torch);
  if (oa.limit)
    oj[field::limit] = {{field::bytes, oa.limit->bytes},
                        {field::kind, oa.limit->kind},
                        {field::title, oa.limit->title}};
  oj[field::findings] = findings_json(oa.findings, origin);
  return oj;
}

// Iterations (and what they were found from) and the NVTX ranges.
void put_iterations_and_ranges(json& pj, const collector::ProcessAnalysis& pa, uint64_t origin) {
  const ProcessModel& p = *pa.model;
  std::string source = p.iteration_source;
  if (source == "kernel")
    source =
        "kernel " + demangle(p.kernel_name(p.iteration_kernel)) +
        (p.iteration_period == 1 ? std::string(" (every launch)")
                                 : " (every " + std::to_string(p.iteration_period) + " launches)");
  json iter = {{field::count, p.iterations.size()}, {"source", source}};
  if (!p.iterations.empty()) iter["first_ns"] = since(p.iterations.front(), origin);
  pj[field::iterations] = iter;
  if (!p.phases_total) return;
  json phases = json::array();
  for (const auto& [name, st] : pa.ranges_by_time)
    phases.push_back(
        {{field::name, p.kernel_name(name)}, {field::count, st.count}, {"total_ns", st.total_ns}});
  json ranges = json::array();
  for (size_t i = 0; i < p.phases.size() && i < 2000; ++i) {
    const auto& ph = p.phases[i];
    ranges.push_back({{field::name, p.kernel_name(ph.name)},
                      {"thread", ph.thread},
                      {"depth", ph.depth},
                      {"start_ns", since(ph.start_ns, origin)},
                      {"end_ns", since(ph.end_ns, origin)}});
  }
  pj["phases"] = {{"by_name", phases}, {"ranges", ranges}, {"total", p.phases_total}};
}

// A process: who it was, how it ended, what it recorded, its devices and its OOMs.
// --torch=sampled: the stretches the trace was off, and where PyTorch's peak of allocated
// memory came in one of them, that peak (categories.at_peak_moment says which moment the block
// view shows instead).
json sampled_json(const collector::TorchContext& ctx, uint64_t origin) {
  json gaps = json::array();
  std::set<uint32_t> devices;
  for (const auto& g : ctx.gaps) {
    gaps.push_back({{field::device, g.device},
                    {"start_ns", since(g.start_ns, origin)},
                    {"end_ns", since(g.end_ns, origin)}});
    devices.insert(g.device);
  }
  json peaks = json::array();
  for (uint32_t dev : devices)
    if (auto g = collector::gap_of_peak(ctx, dev))
      peaks.push_back({{field::device, dev},
                       {field::bytes, *g->end_peak},
                       {"start_ns", since(g->start_ns, origin)},
                       {"end_ns", since(g->end_ns, origin)}});
  return {{"gaps", gaps}, {"peak_between", peaks}};
}

// A failed allocation's error other than out-of-memory, as a word: the result codes the driver
// (CUresult) and the runtime (cudaError_t) share for what an allocation can return; another as
// its number.
std::string failed_allocation_error(uint64_t result) {
  static const std::map<uint64_t, const char*> kNames = {
      {1, "invalid value"},    {3, "not initialized"},  {4, "CUDA shutting down"},
      {100, "no CUDA device"}, {101, "invalid device"}, {201, "invalid context"},
      {801, "not supported"},  {999, "unknown error"}};
  const auto it = kNames.find(result);
  return "CUDA error " + std::to_string(result) +
         (it != kNames.end() ? std::string(" (") + it->second + ")" : std::string());
}

json process_json(const collector::ProcessAnalysis& pa, uint64_t origin) {
  const ProcessModel& p = *pa.model;
  json pj;
  pj[field::pid] = p.pid;
  pj["ppid"] = p.ppid;
  pj["host"] = p.host;
  pj[field::exe] = p.exe;
  pj["cmdline"] = p.cmdline;
  json ranks = json::object();
  for (auto& [k, v] : p.ranks) ranks[k] = v;
  pj[field::ranks] = ranks;
  pj["trace"] = p.trace_path;
  pj["start_realtime_ns"] = p.start_realtime_ns;
  pj["start_ns"] = since(p.start_ns, origin);
  pj["end_ns"] = since(p.end_ns, origin);
  pj[field::clean_exit] = p.clean_exit;
  pj[field::cut_short] = !p.clean_exit && !pa.still_running;
  if (pa.still_running) pj[field::still_running] = true;
  pj["died_of_oom"] = pa.died_of_oom;
  if (!p.problem.empty()) pj["problem"] = p.problem;
  pj["events"] = p.events;
  pj[field::dropped_events] = p.dropped_events;
  pj[field::notices] = p.notices;
  pj[field::profiled] = p.profiled();
  if (!p.profiled()) pj[field::not_profiled_reason] = p.not_profiled;
  if (!p.cupti_library.empty()) pj["cupti_library"] = p.cupti_library;
  if (p.exit_status) pj[field::exit_status] = *p.exit_status;
  pj[field::launches] = {{field::recorded, p.launches_recorded}};
  if (!p.launches_recorded) pj[field::launches]["note"] = kLaunchesNotRecorded;
  if (p.launches_recorded && p.launches_stopped_ns) {
    pj[field::launches]["stopped_ns"] = since(p.launches_stopped_ns, origin);
    pj[field::launches]["note"] =
        p.launches_stop_reason == static_cast<uint64_t>(format::StopReason::kPythonHook)
            ? kLaunchesStoppedByHook
            : kLaunchesStoppedByProgram;
  }
  json devices = json::array();
  for (const auto& [index, da] : pa.devices)
    devices.push_back(process_device_json(p, index, da, origin));
  pj[field::devices] = devices;
  pj["pinned_host"] = {{field::peak_bytes, p.pinned_host.peak_bytes()},
                       {field::final_live_bytes, p.pinned_host.live_bytes()},
                       {"apis", api_table(p.host_apis)}};
  json failures = json::array();
  for (auto& [result, count] : p.failures_by_result)
    failures.push_back({{"error", failed_allocation_error(result)}, {field::count, count}});
  pj["failed_allocations"] = failures;
  put_iterations_and_ranges(pj, pa, origin);
  if (p.torch_trace) {
    pj["torch_allocator_trace"] = {{"merged", true}};
    if (!p.torch_trace_problem.empty())
      pj["torch_allocator_trace"]["problem"] = p.torch_trace_problem;
    if (p.torch_context && !p.torch_context->gaps.empty())
      pj["torch_allocator_trace"]["sampled"] = sampled_json(*p.torch_context, origin);
    if (p.torch_context && p.torch_context->trace_cost) {
      const auto& c = *p.torch_context->trace_cost;
      pj["torch_allocator_trace"]["cost"] = {{"blocks", c.blocks},
                                             {"iteration_ns", c.iteration_ns},
                                             {"trace_ns", c.trace_ns},
                                             {"budget_share", c.budget_ppm / 1e6},
                                             {"sampled", c.sampled}};
      if (c.sampled) pj["torch_allocator_trace"]["cost"]["note"] = collector::trace_sampled_why(c);
    }
  }
  json ooms = json::array();
  for (const auto& oa : pa.ooms) ooms.push_back(oom_json(p, oa, origin));
  pj[field::oom] = ooms;
  return pj;
}

// A device as the whole run saw it; with one process, that process's view of the peak, its
// allocator and (with PyTorch's or XLA's figures) its categories, modules and named tensors.
json run_device_json(const collector::RunAnalysis& a, const collector::RunDeviceAnalysis& rd,
                     uint64_t origin) {
  const Run& run = *a.run;
  const collector::RunDevice& d = *rd.model;
  json by_pid = json::array();
  for (auto& [pid, bytes] : d.peak_by_pid)
    if (bytes) by_pid.push_back({{field::pid, pid}, {field::bytes, bytes}});
  json dj = {{field::index, d.index},
             {"host", d.host},
             {field::name, d.name},
             {"uuid", d.uuid},
             {field::total_bytes, d.total_bytes},
             {field::peak,
              {{field::bytes, d.peak_bytes},
               {field::time_ns, since(d.peak_time_ns, origin)},
               {"by_process", by_pid}}},
             {field::final_live_bytes, rd.final_live_bytes},
             {"timeline", timeline_json(d.timeline, origin)}};
  json& peak = dj[field::peak];
  if (d.total_bytes)
    peak["fraction_of_capacity"] =
        static_cast<double>(d.peak_bytes) / static_cast<double>(d.total_bytes);
  peak["headroom_level"] = collector::headroom_level_name(rd.headroom_level);
  dj["limit_in_chart"] = rd.limit_in_chart;
  if (rd.peak) {
    json top = json::array();
    for (const auto& live : rd.peak->largest) {
      const ProcessModel& p = run.processes[live.allocation->process];
      json aj = allocation_json(live, p, origin);
      aj[field::pid] = p.pid;
      top.push_back(aj);
    }
    for (json& bp : peak["by_process"]) {
      auto n = rd.count_by_pid.find(bp[field::pid].get<uint64_t>());
      bp[field::count] = n == rd.count_by_pid.end() ? 0 : n->second;
    }
    put_live_set(peak, *rd.peak, d.live_at_peak.size(), std::move(top));
  }
  if (rd.device) {
    const ProcessModel& p = *rd.process->model;
    json pp = process_peak_json(p, *rd.device, origin);
    for (const char* k : {"live_allocations", field::by_site, field::by_library, "by_stack",
                          "largest", "last_kernel", field::phase})
      if (pp.contains(k)) peak[k] = pp[k];
    dj["apis"] = api_table(rd.device->model->apis);
    dj["reserved"] = reserved_json(*rd.device->model, origin);
    if (rd.allocator)
      dj["allocator"] =
          allocator_json(*rd.allocator_process->model, d.index, *rd.allocator->model, origin);
  }
  if (rd.torch) add_torch_device(dj, *rd.torch_process->model, *rd.torch->torch, origin);
  return dj;
}

json rank_json(const collector::RankValue& v) { return v.number ? json(*v.number) : json(v.text); }

// One entry per ranked process, in rank order: its peak on each device and the largest; the
// worst rank and the ranks' spread.
void put_ranks(json& report, const collector::RunAnalysis& a, uint64_t origin) {
  const collector::Ranks& r = a.ranks;
  if (r.ranks.empty()) return;
  json ranks = json::array();
  for (const auto& rp : r.ranks) {
    const ProcessModel& p = a.run->processes[rp.process];
    json devices = json::array();
    for (const auto& [index, d] : p.devices)
      devices.push_back({{field::index, index},
                         {field::peak_bytes, d.memory.peak_bytes()},
                         {"peak_time_ns", since(d.memory.peak_time(), origin)}});
    json j = {{field::rank, rank_json(rp.rank)},
              {field::pid, p.pid},
              {"host", p.host},
              {field::peak_bytes, rp.peak_bytes},
              {"peak_device", rp.peak_device},
              {field::devices, devices},
              {field::oom, p.ooms.size()},
              {field::clean_exit, p.clean_exit}};
    if (rp.local_rank) j["local_rank"] = rank_json(*rp.local_rank);
    if (rp.world_size) j["world_size"] = rank_json(*rp.world_size);
    ranks.push_back(j);
  }
  report[field::ranks] = ranks;
  const collector::RankSpread& s = *r.spread;
  const json& worst = ranks[s.worst];
  report[field::worst_rank] = {{field::rank, worst[field::rank]},
                               {field::pid, worst[field::pid]},
                               {"host", worst["host"]},
                               {field::device, worst["peak_device"]},
                               {field::peak_bytes, worst[field::peak_bytes]}};
  report[field::rank_imbalance] = {{"min_peak_bytes", s.min_peak_bytes},
                                   {"max_peak_bytes", s.max_peak_bytes},
                                   {"mean_peak_bytes", s.mean_peak_bytes},
                                   {"spread_bytes", s.spread_bytes},
                                   {field::max_over_mean, s.max_over_mean},
                                   {"imbalance_level", collector::imbalance_level_name(s.level)}};
}

// What was left at the end by site (leak suspects, live at death, kept across iterations).
json left_at_end_json(const std::vector<collector::LeftAtEnd>& left) {
  json out = json::array();
  for (const auto& l : left) {
    json g = site_group_json(l.group);
    g[field::device] = l.device;
    g[field::pid] = l.pid;
    if (l.kept) g[field::kept] = collector::kept_kind_name(*l.kept);
    out.push_back(std::move(g));
  }
  return out;
}

json growth_json(const std::vector<collector::GrowthOnDevice>& growth, uint64_t origin) {
  json out = json::array();
  for (const auto& g : growth) {
    json j = growth_json(g.growth, origin);
    j[field::device] = g.device;
    j[field::pid] = g.pid;
    out.push_back(std::move(j));
  }
  return out;
}

json retained_json(const std::vector<collector::RetainedPool>& retained) {
  json out = json::array();
  for (const auto& r : retained)
    out.push_back({{field::pid, r.pid},
                   {field::device, r.device},
                   {"pool", r.pool->name},
                   {"retained_bytes", r.state.free_bytes()},
                   {"reserved_bytes", r.state.reserved},
                   {"in_use_bytes", r.state.in_use},
                   {"blocks_in_use", r.state.blocks},
                   {"note",
                    "reserved by the allocator and free at exit: cached, not "
                    "leaked (its blocks still in use are in leaks)"}});
  return out;
}

json run_json(const collector::RunAnalysis& a, const RunInfo& info) {
  const Run& run = *a.run;
  json run_j;
  run_j[field::stand_in] = run.stand_in;
  if (run.stand_in)
    run_j["stand_in_note"] =
        "recorded on the CPU stand-in for CUDA (tests/demo), not on a real GPU";
  if (!info.command.empty()) run_j[field::command] = info.command;
  if (info.exit_code) run_j[field::exit_code] = *info.exit_code;
  if (info.signal) run_j[field::signal] = *info.signal;
  // A command killed by a signal did not run to its end.
  run_j[field::complete] = !info.signal && a.processes_complete;
  run_j[field::problems] = run.problems;
  // Processes the library gave up on: the run's peaks are lower bounds (and the CI gate
  // refuses it).
  run_j["processes_not_profiled"] = a.processes_not_profiled;
  run_j["events"] = a.events;
  run_j[field::dropped_events] = a.dropped_events;
  run_j["duration_ns"] = a.duration_ns;
  run_j[field::timeline_end_ns] = a.timeline_end_ns;
  if (a.cuda_start_ns) run_j[field::cuda_start_ns] = since(a.cuda_start_ns, run.origin_ns);
  if (!a.predicted_at_exit.empty()) {
    json list = json::array();
    for (const collector::PredictedAtExit& x : a.predicted_at_exit)
      list.push_back({{field::pid, x.pid},
                      {"last_work_ns", since(x.last_work_ns, run.origin_ns)},
                      {"exit_ns", since(x.exit_ns, run.origin_ns)},
                      {field::note, x.note}});
    run_j[field::predicted_at_exit] = list;
  }
  return run_j;
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

json to_json(const collector::RunAnalysis& a, const RunInfo& info) {
  const uint64_t origin = a.run->origin_ns;
  json report;
  report[field::schema] = kSchema;
  report["tool"] = {{field::name, "vramtrace"}, {"version", VRAMTRACE_VERSION}};
  report["generated_at"] = iso_time_now();
  report[field::run] = run_json(a, info);
  // Processes first: the run-wide devices refer to them.
  json processes = json::array(), ooms = json::array();
  for (const auto& pa : a.processes) {
    processes.push_back(process_json(pa, origin));
    for (const json& oj : processes.back()[field::oom]) ooms.push_back(oj);
  }
  json devices = json::array();
  for (const auto& rd : a.devices) devices.push_back(run_device_json(a, rd, origin));
  report[field::devices] = devices;
  report[field::processes] = processes;
  put_ranks(report, a, origin);
  report[field::oom] = ooms;
  report[field::leaks] = left_at_end_json(a.leaks);
  report[field::live_at_death] = left_at_end_json(a.live_at_death);
  report[field::growth] = growth_json(a.growth, origin);
  report["retained"] = retained_json(a.retained);
  report[field::diagnosis] = diagnosis_json(a.diagnosis);
  if (!a.plans.empty()) report["plan"] = plan_json(a.plans, origin);
  if (!a.preflights.empty()) report["preflight"] = preflight_json(a.preflights, origin);
  return report;
}

json to_json(const Run& run, const RunInfo& info) {
  return to_json(collector::analysis_of(run, info.still_running), info);
}

json live_groups_json(const collector::LiveSet& live) {
  return {{field::by_site, by_site(live.by_site)},
          {field::by_library, by_library(live.by_library)}};
}

json live_json(const collector::MomentAnalysis& m) {
  json now = json::array();
  for (const auto& d : m.now) {
    json e = live_groups_json(d.live);
    json by_process = json::array();
    for (const auto& s : d.by_process)
      by_process.push_back({{"pid", s.pid}, {"bytes", s.bytes}, {"count", s.count}});
    e["host"] = d.host;
    e["device"] = d.device;
    e["bytes"] = d.bytes;
    e["count"] = d.count;
    e["by_process"] = std::move(by_process);
    now.push_back(std::move(e));
  }
  json live = {{"running", true}, {"now", std::move(now)}};
  live["cuda_used"] = m.cuda_used;
  if (!m.note.empty()) live["note"] = m.note;
  return live;
}

}  // namespace vramtrace::report

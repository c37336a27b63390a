// The run's analysis, from the model (see analysis.h): each process's devices and OOMs, what
// was left at the end, then the run-wide devices, the ranks and the diagnosis.
#include "collector/analysis/analysis.h"

#include <algorithm>
#include <cstdio>

#include "collector/ingest/torch_trace.h"

namespace vramtrace::collector {

namespace {

StacksOf one_process(StackResolver& stacks) {
  return [&stacks](const Allocation&) -> StackResolver& { return stacks; };
}

std::vector<GrowthAtSite> with_sites(const std::vector<SiteGrowth>& growth, StackResolver& stacks) {
  std::vector<GrowthAtSite> out;
  for (const SiteGrowth& g : growth) out.push_back({g, site_of(g.example, stacks)});
  return out;
}

// What the process still held on device `d` at its end: leak suspects (or what was live when
// it died), what its forwards kept across iterations, what allocators only cached, and the
// sites that grew.
void left_at_end(RunAnalysis& a, const ProcessAnalysis& pa, uint32_t index, DeviceAnalysis& da,
                 const std::vector<Allocation>& still, StackResolver& stacks) {
  const ProcessModel& p = *pa.model;
  const DeviceModel& d = *da.model;
  const bool died = process_died(p);
  StillLive left = still_live(p, index, still, died, [&stacks](const Allocation& a) {
    return a.stack || a.py_stack ? stacks.attribute(a.stack, a.py_stack).library : std::string();
  });
  da.retained_segment_bytes = left.retained_segment_bytes;
  da.model_state_bytes = left.model_state_bytes;
  da.cuda_graph_bytes = left.cuda_graph_bytes;
  da.library_workspace_bytes = left.library_workspace_bytes;
  for (auto& [id, pool] : p.user_pools) {
    if (pool.device != index) continue;
    auto st = pool.view.state();
    if (st.free_bytes()) a.retained.push_back({p.pid, index, &pool, st});
  }
  // What the forwards keep across iterations is the diagnosis' cause, not a leak.
  std::vector<Allocation> kept_blocks;
  std::optional<KeptAcrossIterations> kept;
  if (p.torch_memory && !died && !pa.still_running) {
    kept = kept_across_iterations(*p.torch_memory, index, UINT64_MAX - 1);
    if (kept) kept_blocks = take_kept(*p.torch_memory, *kept, index, left.suspects);
  }
  // `vramtrace plan` ended the process before its first step: what it held then (its model, its
  // batch) was in use, not left behind.
  const bool plan_stop = p.torch_context && p.torch_context->plan_stop;
  if (!pa.still_running && !plan_stop) {
    for (SiteGroup& g : by_site(left.suspects, stacks))
      (died ? a.live_at_death : a.leaks).push_back({std::move(g), index, p.pid, std::nullopt});
    for (SiteGroup& g : by_site(kept_blocks, stacks))
      a.leaks.push_back({std::move(g), index, p.pid, kept->kind});
  }
  for (GrowthAtSite& g :
       with_sites(device_growth(p, d, left.suspects, site_text_of(stacks)), stacks))
    a.growth.push_back({std::move(g), index, p.pid});
}

// One device of a process: what was live at its peak, the kernels it ran most, PyTorch's view
// of it, and what was left at the end.
void analyse_device(RunAnalysis& a, ProcessAnalysis& pa, uint32_t index, const DeviceModel& d,
                    std::vector<Allocation>& still, StackResolver& stacks) {
  const ProcessModel& p = *pa.model;
  std::sort(still.begin(), still.end(),
            [](const Allocation& x, const Allocation& y) { return x.bytes > y.bytes; });
  DeviceAnalysis& da = pa.devices[index];
  da.model = &d;
  da.peak = live_set(d.live_at_peak, one_process(stacks), kTopAllocations, true);
  std::vector<std::pair<uint32_t, uint64_t>> ks = d.launches_by_kernel.all();
  std::sort(ks.begin(), ks.end(), [](auto& x, auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  if (ks.size() > kTopKernels) ks.resize(kTopKernels);
  da.top_kernels = std::move(ks);
  da.final_live_allocations = still.size();
  da.torch = torch_device(p, d, pa.timeline_end_ns, stacks);
  left_at_end(a, pa, index, da, still, stacks);
}

// An OOM: the request's site, what was live then, what grew up to it, the effective limit, its
// moment in PyTorch's terms and the findings those figures support.
OomAnalysis analyse_oom(const ProcessModel& p, const OomEvent& o, StackResolver& stacks) {
  OomAnalysis oa;
  oa.event = &o;
  for (const Allocation& x : o.live) {
    if (oa.live.largest.size() == kTopOomAllocations) break;
    oa.live.largest.push_back({&x, site_of(x, stacks)});
  }
  Allocation request;
  request.api = o.api;
  request.stack = o.stack;
  request.py_stack = o.py_stack;
  oa.site = site_of(request, stacks);
  oa.live.by_site = by_site(o.live, stacks);
  oa.live.by_library = by_library(o.live, one_process(stacks));
  // What the device had in use that this process did not hold: other processes, other
  // contexts, the driver itself.
  oa.held_by_others = held_by_others(o);
  OomFindingInput fin;
  fin.oom = &o;
  fin.held_by_others = oa.held_by_others;
  fin.torch = p.torch_memory != nullptr;
  fin.growth = growth_by_site(o.survivors, p, o.time_ns, site_text_of(stacks));
  if (o.allocator)
    for (auto& [id, pool] : p.user_pools)
      if (pool.name == o.pool && pool.torch) fin.torch_pool = true;
  if (p.torch_memory) fin.kept = kept_across_iterations(*p.torch_memory, o.device, o.time_ns);
  oa.growth = with_sites(fin.growth, stacks);
  oa.torch = torch_oom(p, o, stacks);
  // Headroom against the effective limit (PyTorch's per-process fraction, what other
  // processes left): the device's free memory beyond it was never this process's.
  auto lim = oom_limit(o, p);
  if (lim.kind != "device") oa.limit = fin.limit = lim;
  for (const SiteGroup& s : oa.live.by_site) fin.live_by_site.emplace_back(s.site, s.bytes);
  for (OomFinding& f : oom_findings(fin)) {
    OomFindingAtSites fs{std::move(f), {}};
    if (fs.finding.kind == FindingKind::Growth)
      for (const SiteGrowth& g : fs.finding.evidence.growth_sites)
        fs.growth_sites.push_back(site_of(g.example, stacks));
    oa.findings.push_back(std::move(fs));
  }
  return oa;
}

// Whether the start-up hook completed the process's first step on fake tensors at its exit: it
// died in that step and the hook predicted the rest of it (a predicted step with no change),
// neither `vramtrace plan` nor a pre-flight having predicted it before it ran.
bool first_step_predicted_at_exit(const ProcessModel& p) {
  const TorchContext* ctx = p.torch_context.get();
  if (!ctx || ctx->plan_stop || ctx->preflight || !process_died(p)) return false;
  return std::any_of(
      ctx->predicted_steps.begin(), ctx->predicted_steps.end(),
      [](const TorchPredictedStep& s) { return s.change.empty() && s.status == "ok"; });
}

// Whether `vramtrace plan` stopped the process: its steps ran on fake tensors after its last
// CUDA work, until its exit.
bool stopped_for_plan(const ProcessModel& p) {
  return p.torch_context && p.torch_context->plan_stop;
}

// Where a process's timelines end: its end, unless its first step was predicted at its exit or
// run on fake tensors for a plan, which took the time after its last CUDA work (seconds,
// against the step's fraction of one): drawn, that time would read as memory held.
uint64_t timeline_end(const ProcessModel& p) {
  const bool cut = (first_step_predicted_at_exit(p) || stopped_for_plan(p)) && p.work_end_ns &&
                   p.work_end_ns < p.end_ns;
  return cut ? p.work_end_ns : p.end_ns;
}

// The processes whose timelines end before their exit, and the sentence that says why, its
// times on the report's clock (from the first CUDA work when known).
std::vector<PredictedAtExit> predicted_at_exit(const RunAnalysis& a) {
  const uint64_t clock = a.cuda_start_ns ? a.cuda_start_ns : a.run->origin_ns;
  const auto at = [clock](uint64_t t) {
    return (static_cast<double>(t) - static_cast<double>(clock)) / 1e9;
  };
  std::vector<PredictedAtExit> out;
  for (const ProcessAnalysis& pa : a.processes) {
    const ProcessModel& p = *pa.model;
    if (pa.timeline_end_ns >= p.end_ns) continue;
    char text[512];
    std::snprintf(text, sizeof text,
                  stopped_for_plan(p)
                      ? "Process %llu stopped for a plan: from its last CUDA work (%.3f s) to "
                        "its exit (%.3f s), %.3f s went to its steps on fake tensors, which used "
                        "no device memory; the timeline ends at its last CUDA work."
                      : "Process %llu died in its first training step: from its last CUDA work "
                        "(%.3f s) to its exit (%.3f s), %.3f s went to predicting the rest of "
                        "that step on fake tensors, which used no device memory; the timeline "
                        "ends at its last CUDA work.",
                  static_cast<unsigned long long>(p.pid), at(pa.timeline_end_ns), at(p.end_ns),
                  static_cast<double>(p.end_ns - pa.timeline_end_ns) / 1e9);
    out.push_back({p.pid, pa.timeline_end_ns, p.end_ns, text});
  }
  return out;
}

void analyse_process(RunAnalysis& a, ProcessAnalysis& pa, StackResolver& stacks) {
  const ProcessModel& p = *pa.model;
  std::map<uint32_t, std::vector<Allocation>> still_by_device;  // once, not once per device
  for (const auto& [k, x] : p.live) still_by_device[x.device].push_back(x);
  for (const auto& [k, h] : p.vmm_handles) still_by_device[h.alloc.device].push_back(h.alloc);
  for (const auto& [index, d] : p.devices)
    analyse_device(a, pa, index, d, still_by_device[index], stacks);
  if (p.phases_total) {
    pa.ranges_by_time.assign(p.range_stats.begin(), p.range_stats.end());
    std::stable_sort(
        pa.ranges_by_time.begin(), pa.ranges_by_time.end(),
        [](const auto& x, const auto& y) { return x.second.total_ns > y.second.total_ns; });
  }
  for (const auto& o : p.ooms) {
    pa.ooms.push_back(analyse_oom(p, o, stacks));
    if (o.fatal) pa.died_of_oom = true;
  }
}

// The run-wide devices: each process's final figure summed, and what was live at the peak,
// the one process's view or everyone's together.
void analyse_run_devices(RunAnalysis& a) {
  const Run& run = *a.run;
  for (const RunDevice& d : run.devices) {
    RunDeviceAnalysis rd;
    rd.model = &d;
    int with_torch = 0, processes = 0;
    for (const ProcessAnalysis& pa : a.processes) {
      if (pa.model->host != d.host) continue;
      auto it = pa.devices.find(d.index);
      if (it == pa.devices.end()) continue;
      const DeviceAnalysis& da = it->second;
      rd.final_live_bytes += da.model->memory.live_bytes();
      rd.process = &pa;
      rd.device = &da;
      if (da.model->has_allocator_view) {
        rd.allocator_process = &pa;
        rd.allocator = &da;
      }
      ++processes;
      if (da.torch && (da.torch->classified || da.torch->xla)) {
        ++with_torch;
        rd.torch_process = &pa;
        rd.torch = &da;
      }
    }
    if (with_torch != 1 || processes != 1) rd.torch_process = nullptr, rd.torch = nullptr;
    if (d.peak_by_pid.size() > 1) {
      rd.process = nullptr;
      rd.device = nullptr;
      rd.allocator_process = nullptr;
      rd.allocator = nullptr;
      rd.peak = live_set(
          d.live_at_peak,
          [&a](const Allocation& x) -> StackResolver& { return *a.stacks[x.process]; },
          kTopAllocations, true);
      for (const Allocation& x : d.live_at_peak) ++rd.count_by_pid[run.processes[x.process].pid];
    }
    a.devices.push_back(std::move(rd));
  }
}

// Each device's peak against its effective limit (the diagnosis' on the diagnosed device, else
// the device's capacity), and whether the chart draws that limit: against the chart's top, the
// device's peak, the highest sum of its categories over time and each OOM's live bytes and
// request (levels.h).
void judge_devices(RunAnalysis& a) {
  const Diagnosis& dg = a.diagnosis;
  for (RunDeviceAnalysis& rd : a.devices) {
    const RunDevice& d = *rd.model;
    const bool diagnosed = dg.device && *dg.device == d.index && !dg.limit.kind.empty();
    rd.limit_bytes = diagnosed ? dg.limit.bytes : d.total_bytes;
    rd.headroom_level = headroom_level(d.peak_bytes, rd.limit_bytes);
    uint64_t top = d.peak_bytes;
    if (rd.torch)
      for (const CategoryBytes& row : rd.torch->torch->series) {
        uint64_t sum = 0;
        for (uint64_t v : row) sum += v;
        top = std::max(top, sum);
      }
    for (const ProcessModel& p : a.run->processes) {
      if (p.host != d.host) continue;
      for (const OomEvent& o : p.ooms)
        if (o.device == d.index && !o.recovered)
          top = std::max(top, o.live_bytes + o.requested_bytes);
    }
    rd.limit_in_chart = limit_in_chart(rd.limit_bytes, top);
  }
}

}  // namespace

std::string trace_sampled_why(const TorchTraceCost& c) {
  if (!c.sampled) return {};
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "the trace would cost %.1f %% of an iteration, %llu blocks in %.1f ms, over its "
      "budget of %.3g %%; --torch=full records every one",
      100.0 * static_cast<double>(c.trace_ns) / std::max(1.0, static_cast<double>(c.iteration_ns)),
      static_cast<unsigned long long>(c.blocks), static_cast<double>(c.iteration_ns) / 1e6,
      static_cast<double>(c.budget_ppm) / 1e4);
  return buf;
}

RunAnalysis analysis_of(const Run& run, const std::vector<std::string>& still_running) {
  RunAnalysis a;
  a.run = &run;
  a.symbols = std::make_unique<Symbolizer>();
  uint64_t end = run.origin_ns;
  for (const auto& p : run.processes) {
    a.stacks.push_back(std::make_unique<StackResolver>(p, *a.symbols));
    if (!p.clean_exit || !p.problem.empty()) a.processes_complete = false;
    // Processes the library gave up on (no CUPTI, CUPTI held by another tool): their device
    // memory is in no record, so the run's peaks are lower bounds.
    a.processes_not_profiled += !p.profiled();
    a.events += p.events;
    a.dropped_events += p.dropped_events;
    end = std::max(end, p.end_ns);
  }
  a.duration_ns = end - run.origin_ns;
  for (const RunDevice& d : run.devices)
    if (d.first_ns && (!a.cuda_start_ns || d.first_ns < a.cuda_start_ns))
      a.cuda_start_ns = d.first_ns;
  a.processes.resize(run.processes.size());
  uint64_t timelines_end = run.origin_ns;
  for (size_t i = 0; i < run.processes.size(); ++i) {
    ProcessAnalysis& pa = a.processes[i];
    pa.model = &run.processes[i];
    pa.timeline_end_ns = timeline_end(*pa.model);
    timelines_end = std::max(timelines_end, pa.timeline_end_ns);
    // A memory snapshot is a moment of a process that went on (its dump need not be its end).
    pa.still_running = std::find(still_running.begin(), still_running.end(),
                                 pa.model->trace_path) != still_running.end() ||
                       (pa.model->torch_context && pa.model->torch_context->from_snapshot);
    analyse_process(a, pa, *a.stacks[i]);
  }
  a.timeline_end_ns = timelines_end - run.origin_ns;
  a.predicted_at_exit = predicted_at_exit(a);
  analyse_run_devices(a);
  a.ranks = ranks_of(run);
  const auto larger = [](const LeftAtEnd& x, const LeftAtEnd& y) {
    return x.group.bytes > y.group.bytes;
  };
  std::stable_sort(a.leaks.begin(), a.leaks.end(), larger);
  std::stable_sort(a.live_at_death.begin(), a.live_at_death.end(), larger);
  a.diagnosis = diagnosis_of(a);
  judge_devices(a);
  a.plans = plans_of(run);
  a.preflights = preflights_of(run);
  return a;
}

}  // namespace vramtrace::collector

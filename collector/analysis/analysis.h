// The run's analysis: everything report.json, the summary and the page say about a run that is
// not already a figure of the model (collector/model/model.h), as typed values. One entry point,
// analysis_of(Run), computes what was live at each device's peak and at each OOM (by site,
// library and stack), each OOM's findings, PyTorch's categories over time and its modules and
// lines at the peak, growth, leak suspects, memory kept across iterations or cached by an
// allocator, the ranks' peaks and the diagnosis with its remedies. report/ only writes it out.
//
// The analysis points into the Run it was made from (allocations, pools, labels) and owns the
// stack resolvers its sites' frames live in: keep the Run alive as long as the analysis.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/leaks.h"
#include "collector/analysis/levels.h"
#include "collector/analysis/live_set.h"
#include "collector/analysis/oom_findings.h"
#include "collector/analysis/ranks.h"
#include "collector/analysis/retention.h"
#include "collector/analysis/run_diagnosis.h"
#include "collector/analysis/stacks.h"
#include "collector/analysis/torch_device.h"
#include "collector/model/model.h"
#include "collector/predict/plan.h"
#include "collector/predict/preflight.h"

namespace vramtrace::collector {

inline constexpr size_t kTopAllocations = 50;     // the largest allocations live at a peak
inline constexpr size_t kTopOomAllocations = 10;  // the largest live at an OOM
inline constexpr size_t kTopKernels = 20;         // the kernels launched most on a device

// A site whose memory grew across iterations, with the library and stack of one of its
// allocations.
struct GrowthAtSite {
  SiteGrowth growth;
  Site site;
};

// An OOM's finding, with the site (library, stack) of each of its growing sites.
struct OomFindingAtSites {
  OomFinding finding;
  std::vector<Site> growth_sites;  // by finding.evidence.growth_sites (growth findings)
};

struct OomAnalysis {
  const OomEvent* event = nullptr;
  Site site;     // of the failed request
  LiveSet live;  // what the process held then: by site, by library, the largest
  std::optional<uint64_t> held_by_others;   // in use on the device, not by this process
  std::vector<GrowthAtSite> growth;         // sites growing up to it, fastest first
  std::optional<EffectiveLimit> limit;      // a limit tighter than the device, if any
  std::vector<OomFindingAtSites> findings;  // likeliest first
  std::optional<TorchOom> torch;            // its moment in PyTorch's terms
};

// One device of one process.
struct DeviceAnalysis {
  const DeviceModel* model = nullptr;
  LiveSet peak;                                            // what was live at its peak
  std::vector<std::pair<uint32_t, uint64_t>> top_kernels;  // (name id, launches), most first
  uint64_t final_live_allocations = 0;  // driver allocations and VMM handles live at the end
  // Of what was live at the end: segments a sub-allocator only cached, the model's named
  // tensors, CUDA graphs' private pools' blocks (collector/analysis/leaks.h's StillLive).
  uint64_t retained_segment_bytes = 0, model_state_bytes = 0, cuda_graph_bytes = 0;
  // What cuBLAS, cuDNN and the other math libraries still held at a PyTorch process's clean
  // exit (their handles' workspaces, which PyTorch keeps for the life of the process).
  uint64_t library_workspace_bytes = 0;
  std::optional<TorchDevice> torch;
};

struct ProcessAnalysis {
  const ProcessModel* model = nullptr;
  // Where its timelines end (the trace's clock): its end, or its last CUDA work when the time
  // after it went to predicting its first step on fake tensors (PredictedAtExit).
  uint64_t timeline_end_ns = 0;
  // Still sending when the launcher stopped waiting (it outlived the command): running, not
  // cut short, and what it held then is not a leak.
  bool still_running = false;
  std::map<uint32_t, DeviceAnalysis> devices;
  std::vector<OomAnalysis> ooms;
  // An out-of-memory error ended it (one of its OOMs is fatal): who died, said once for every
  // view.
  bool died_of_oom = false;
  // The NVTX ranges by name (name id, figures), longest in all first.
  std::vector<std::pair<uint32_t, ProcessModel::RangeStats>> ranges_by_time;
};

// A process that died in its first training step, whose step the start-up hook then completed
// on fake tensors at its exit (for the diagnosis' remedies): from its last CUDA work to its exit
// it used no device memory, so its timelines end at that work and this says where the rest of
// its time went.
struct PredictedAtExit {
  uint64_t pid = 0;
  uint64_t last_work_ns = 0, exit_ns = 0;  // the trace's clock
  std::string note;                        // the sentence every view gives, on the report's clock
};

// What a process left on a device at its end, by site: leak suspects, what was live when it
// died, or what its forwards kept across iterations (`kept`).
struct LeftAtEnd {
  SiteGroup group;
  uint32_t device = 0;
  uint64_t pid = 0;
  std::optional<KeptKind> kept;
};

struct GrowthOnDevice {
  GrowthAtSite growth;
  uint32_t device = 0;
  uint64_t pid = 0;
};

// A sub-allocator's pool that had reserved memory free at the end: cached, not leaked.
struct RetainedPool {
  uint64_t pid = 0;
  uint32_t device = 0;
  const UserPool* pool = nullptr;
  FragmentationState state;
};

// A device as the whole run saw it.
struct RunDeviceAnalysis {
  const RunDevice* model = nullptr;
  uint64_t final_live_bytes = 0;  // every process's
  // One process (the device's peak names at most one pid): that process's view of the peak is
  // the device's (the last such process of the run; `allocator`: the last with a
  // sub-allocator's view of the device).
  const ProcessAnalysis* process = nullptr;
  const DeviceAnalysis* device = nullptr;
  const ProcessAnalysis* allocator_process = nullptr;
  const DeviceAnalysis* allocator = nullptr;
  // Several processes: what each held at the device's peak, together, each allocation resolved
  // with its own process's stacks, and how many allocations each had.
  std::optional<LiveSet> peak;
  std::map<uint64_t, uint64_t> count_by_pid;
  // The one process's device with PyTorch's or XLA's figures, when just one process used the
  // device: its categories, phases, modules and named tensors are the device's.
  const ProcessAnalysis* torch_process = nullptr;
  const DeviceAnalysis* torch = nullptr;
  // Its peak against its effective limit (levels.h; the diagnosis' limit on the diagnosed
  // device, else its capacity), and whether the chart draws that limit. Set by analysis_of()
  // after the diagnosis.
  uint64_t limit_bytes = 0;
  HeadroomLevel headroom_level = HeadroomLevel::Unknown;
  bool limit_in_chart = false;
};

struct RunAnalysis {
  const Run* run = nullptr;
  std::unique_ptr<Symbolizer> symbols;
  std::vector<std::unique_ptr<StackResolver>> stacks;  // by process

  bool processes_complete = true;  // every process reached its exit, with nothing wrong
  uint64_t processes_not_profiled = 0, events = 0, dropped_events = 0;
  uint64_t duration_ns = 0;  // from the first process's start to the last one's end
  // Where the run's timelines end, from the first process's start as duration_ns: the last
  // process's timeline_end_ns (its end, or its last CUDA work before a prediction at exit).
  uint64_t timeline_end_ns = 0;
  std::vector<PredictedAtExit> predicted_at_exit;  // by process
  // The run's first CUDA work (a context created, else an allocation, on any device; the
  // trace's clock, 0: none): the origin of every time the report's words and its chart give,
  // so that a job's seconds of imports before CUDA do not shift them.
  uint64_t cuda_start_ns = 0;

  std::vector<ProcessAnalysis> processes;  // by Run::processes
  std::vector<RunDeviceAnalysis> devices;  // by Run::devices
  Ranks ranks;
  std::vector<LeftAtEnd> leaks;          // largest first
  std::vector<LeftAtEnd> live_at_death;  // largest first
  std::vector<GrowthOnDevice> growth;    // by process and device, fastest first in each
  std::vector<RetainedPool> retained;
  Diagnosis diagnosis;
  // `vramtrace plan`: the processes the start-up hook stopped before their first training step.
  std::vector<ProcessPlan> plans;
  // `vramtrace run --preflight`: each process's first step predicted before it ran, beside the
  // same step recorded.
  std::vector<ProcessPreflight> preflights;
};

// `still_running`: the traces (paths) of processes that outlived the command and were still
// running when the report was made (what they held is not counted as leaked).
RunAnalysis analysis_of(const Run& run, const std::vector<std::string>& still_running = {});

// Why PyTorch's allocator trace was sampled by default, as every view says it: what the trace
// would have cost of an iteration against its budget ("" when it was not sampled for its cost).
std::string trace_sampled_why(const TorchTraceCost& cost);

// The diagnosis (run_diagnosis.h), from the OOMs' findings and the growth the rest of the
// analysis found: analysis_of()'s last step, in run_diagnosis.cpp.
Diagnosis diagnosis_of(const RunAnalysis& a);

}  // namespace vramtrace::collector

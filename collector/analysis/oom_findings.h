// Why an OOM happened, as ranked findings: each a cause that the run's own figures at that
// moment support (the process's limit, the request, the allocator's free blocks, what other
// processes held, growth across iterations, how full the process was), with those figures as
// its evidence, a one-line title and what to try. A finding's words are part of it: the report
// only renders them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/leaks.h"
#include "collector/analysis/retention.h"
#include "collector/model/model.h"
#include "common/bytes_text.h"

namespace vramtrace::collector {

// What the device had in use at the OOM that this process did not hold (other processes,
// other contexts, the driver itself); none without the driver's free and total figures.
std::optional<uint64_t> held_by_others(const OomEvent& o);

// The limit the process ran against at the OOM (effective_limit). An OOM PyTorch raised
// without asking the driver (its per-process fraction refused the segment) has no
// cuMemGetInfo of its own: the device's capacity stands in.
EffectiveLimit oom_limit(const OomEvent& o, const ProcessModel& p);

enum class FindingKind {
  LimitReached,     // the process reached PyTorch's per-process fraction
  RequestTooLarge,  // the request alone is larger than the GPU
  Fragmentation,    // the allocator's free memory was there, in pieces too small
  HeldByOthers,     // other processes (or the driver) held much of the GPU
  Growth,           // live memory grew across iterations
  NearCapacity,     // the process itself held nearly all of its limit
  KeptGraph,        // forwards' autograd graphs kept across iterations (no backward)
  KeptOutputs,      // forwards' outputs kept past their step
};
const char* finding_kind_name(FindingKind k);  // "limit_reached", ...

// The measured figures behind a finding; each kind sets its own.
struct FindingEvidence {
  std::optional<uint64_t> requested_bytes, live_bytes, limit_bytes, total_bytes;
  std::optional<uint64_t> device_free_bytes;  // limit_reached: free on the device, past the limit
  std::optional<uint64_t> free_reserved_bytes, largest_free_block_bytes, free_blocks;
  std::optional<double> external_fragmentation;
  std::optional<uint64_t> held_by_others_bytes, free_bytes, this_process_bytes;
  std::optional<uint64_t> bytes_per_iteration, grown_bytes, since_ns;  // since_ns: trace clock
  std::optional<int64_t> iterations;
  std::vector<SiteGrowth> growth_sites;  // growth: the fastest-growing sites (at most 5)
  std::vector<std::pair<std::string, uint64_t>> top_sites;  // near_capacity: largest live (3)
  // kept_graph, kept_outputs: the modules that made what was kept, largest first (at most 5).
  std::vector<std::pair<std::string, uint64_t>> kept_modules;
};

struct OomFinding {
  FindingKind kind = FindingKind::NearCapacity;
  double score = 0;  // how likely it is the cause, 0..1
  size_t rank = 0;   // 1 for the likeliest
  std::string title;
  FindingEvidence evidence;
  std::string suggestion;
};

struct OomFindingInput {
  const OomEvent* oom = nullptr;
  // The limit tighter than the device (oom_limit when its kind is not "device"), if any.
  std::optional<EffectiveLimit> limit;
  std::optional<uint64_t> held_by_others;  // held_by_others(oom)
  std::vector<SiteGrowth> growth;          // growth_by_site of the OOM's survivors, fastest first
  std::vector<std::pair<std::string, uint64_t>>
      live_by_site;         // the live set by site, largest first
  bool torch_pool = false;  // the allocator that ran out is PyTorch's
  // The process is a PyTorch program (its allocator trace was merged): what to try is said in
  // PyTorch's terms; otherwise in CUDA's, as the diagnosis's remedies are.
  bool torch = false;
  // What PyTorch's forwards kept across iterations until the OOM (retention.h), if anything.
  std::optional<KeptAcrossIterations> kept;
};

// The findings the figures support, likeliest first (rank 1), ties in the order above.
std::vector<OomFinding> oom_findings(const OomFindingInput& in);

// A finding's evidence as it is shown, in words, each figure typed (one of bytes, count,
// fraction, time on the trace's clock, or sites: named figures, largest first): the figures in
// bytes first, in their labels' order, then the others. The diagnosis' cause shows those in
// bytes (run_diagnosis.cpp's cause_of); report.json carries them all (evidence_shown), which the
// page shows instead of deciding its own labels and units from the keys.
struct EvidenceItem {
  std::string label;
  std::optional<uint64_t> bytes, count, time_ns;
  std::optional<double> fraction;
  std::vector<std::pair<std::string, uint64_t>> sites;
};
std::vector<EvidenceItem> evidence_items(const OomFinding& f);

}  // namespace vramtrace::collector

// The ranked findings of an OOM and the figures they start from (see oom_findings.h).
#include "collector/analysis/oom_findings.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>

namespace vramtrace::collector {

std::optional<uint64_t> held_by_others(const OomEvent& o) {
  if (!o.free_bytes || !o.total_bytes) return std::nullopt;
  // The driver's two figures are read apart from this process's count: what it held may
  // exceed what the driver said was in use, and then nothing is others'.
  if (*o.total_bytes >= *o.free_bytes + o.live_bytes)
    return *o.total_bytes - *o.free_bytes - o.live_bytes;
  return 0;
}

EffectiveLimit oom_limit(const OomEvent& o, const ProcessModel& p) {
  uint64_t total = o.total_bytes.value_or(0);
  if (!total && p.devices.count(o.device)) total = p.devices.at(o.device).total_bytes;
  return effective_limit(total, p.torch_memory.get(), o.device, held_by_others(o));
}

const char* finding_kind_name(FindingKind k) {
  switch (k) {
    case FindingKind::LimitReached: return "limit_reached";
    case FindingKind::RequestTooLarge: return "request_too_large";
    case FindingKind::Fragmentation: return "fragmentation";
    case FindingKind::HeldByOthers: return "held_by_others";
    case FindingKind::Growth: return "growth";
    case FindingKind::NearCapacity: return "near_capacity";
    case FindingKind::KeptGraph: return "kept_graph";
    case FindingKind::KeptOutputs: return "kept_outputs";
  }
  return "";
}

namespace {

// What every finding of one OOM reads, and the list they are added to.
struct Findings {
  const OomFindingInput& in;
  const OomEvent& o;
  uint64_t request = 0, total = 0, free_b = 0, limit = 0;
  bool fraction = false;  // the limit is PyTorch's per-process memory fraction
  std::vector<OomFinding> out{};

  void add(double score, FindingKind kind, std::string title, FindingEvidence evidence,
           std::string suggestion) {
    out.push_back({kind, score, 0, std::move(title), std::move(evidence), std::move(suggestion)});
  }
};

// The process's own limit (PyTorch's fraction), and a request larger than the GPU.
void limit_findings(Findings& f) {
  const OomFindingInput& in = f.in;
  const OomEvent& o = f.o;
  uint64_t& free_b = f.free_b;
  uint64_t& limit = f.limit;
  const uint64_t request = f.request, total = f.total;
  const bool fraction = f.fraction;
  auto add = [&f](auto&&... a) { f.add(std::forward<decltype(a)>(a)...); };
  if (in.limit) {
    limit = in.limit->bytes;
    free_b = std::min(free_b, limit > o.live_bytes ? limit - o.live_bytes : 0);
    if (fraction && o.live_bytes + request > limit) {
      FindingEvidence ev;
      ev.limit_bytes = limit;
      ev.live_bytes = o.live_bytes;
      ev.requested_bytes = request;
      ev.device_free_bytes = o.free_bytes.value_or(0);
      add(0.95, FindingKind::LimitReached,
          "The process reached its limit, " + in.limit->title + ": it held " +
              human_bytes(o.live_bytes) + " when it asked for " + human_bytes(request) + " more",
          ev,
          "Use less memory at the peak (the remedies below say how much each saves), or raise "
          "the fraction (torch.cuda.set_per_process_memory_fraction).");
    }
  }
  // No cap known (a PyTorch memory snapshot does not hold the per-process fraction), but the
  // device had the request free when PyTorch's allocator refused it: a cap below the device did.
  if (!(in.limit && fraction) && in.torch_pool && o.allocator && o.free_bytes &&
      *o.free_bytes >= std::max(request, o.requested_bytes) && (!total || request <= total)) {
    FindingEvidence ev;
    ev.live_bytes = o.live_bytes;
    ev.requested_bytes = request;
    ev.device_free_bytes = *o.free_bytes;
    add(0.9, FindingKind::LimitReached,
        "The device had " + human_bytes(*o.free_bytes) + " free, more than the " +
            human_bytes(request) +
            " asked: a cap below the device refused it (PyTorch's "
            "per-process fraction, not recorded here), with " +
            human_bytes(o.live_bytes) + " held",
        ev,
        "Use less memory at the peak (the remedies below say how much each saves), or raise "
        "the fraction (torch.cuda.set_per_process_memory_fraction).");
  }
  if (total && request > total) {
    FindingEvidence ev;
    ev.requested_bytes = request;
    ev.total_bytes = total;
    add(1.0, FindingKind::RequestTooLarge,
        "The request alone (" + human_bytes(request) + ") is larger than the GPU (" +
            human_bytes(total) + ")",
        ev,
        in.torch ? "Split the tensor or buffer (shard it, or process it in chunks)."
                 : "Split the buffer: process the data in chunks, or shard it across GPUs.");
  }
}

// The request fit in the free memory the allocator reserved, but in no one piece of it.
void fragmentation_finding(Findings& f) {
  const OomFindingInput& in = f.in;
  const OomEvent& o = f.o;
  const uint64_t request = f.request, free_b = f.free_b;
  auto add = [&f](auto&&... a) { f.add(std::forward<decltype(a)>(a)...); };
  if (o.fragmentation) {
    const auto& fs = *o.fragmentation;
    FindingEvidence ev;
    ev.requested_bytes = request;
    ev.free_reserved_bytes = fs.free_bytes();
    ev.largest_free_block_bytes = fs.largest_free;
    ev.free_blocks = fs.free_blocks;
    ev.external_fragmentation = fs.external();
    std::string fix =
        in.torch_pool
            ? "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, so that PyTorch maps free "
              "pieces into one range instead of leaving them stranded in fixed segments; or "
              "allocate the largest long-lived tensors first."
            : "The pool's free memory is split into blocks smaller than the request: size its "
              "segments for the largest request, allocate long-lived buffers first, or let it "
              "release empty segments.";
    // The cause even under a cap: the memory the request needed was the process's already,
    // only in pieces, so reaching the cap (limit_reached) is the symptom.
    if (fs.free_bytes() >= request && fs.largest_free < request)
      add(0.97, FindingKind::Fragmentation,
          human_bytes(fs.free_bytes()) + " reserved by " + o.pool +
              (o.pool.empty() ? "the allocator" : "") + " was free, in " +
              std::to_string(fs.free_blocks) + " blocks, but the largest (" +
              human_bytes(fs.largest_free) + ") is smaller than the request (" +
              human_bytes(request) + ")",
          ev, fix);
    else if (fs.free_bytes() < request && free_b < request && fs.free_bytes() + free_b >= request &&
             fs.largest_free < request && fs.free_bytes() > request / 4)
      add(0.6, FindingKind::Fragmentation,
          human_bytes(fs.free_bytes()) + " reserved but free and " + human_bytes(free_b) +
              " free on the device would together have served the request, but neither does "
              "alone",
          ev, fix);
  }
}

// Other processes (or the driver) held what this process needed.
void others_finding(Findings& f) {
  const OomFindingInput& in = f.in;
  const OomEvent& o = f.o;
  const uint64_t request = f.request, total = f.total, free_b = f.free_b;
  const bool fraction = f.fraction;
  auto add = [&f](auto&&... a) { f.add(std::forward<decltype(a)>(a)...); };
  if (in.held_by_others) {
    const uint64_t others = *in.held_by_others;
    // Decisive when, without them, the request would have fit and they are more than a CUDA
    // context's own overhead (which the driver counts here too).
    constexpr uint64_t kContextOverhead = 1ull << 30;
    // Under PyTorch's fraction, when the device still had the request free, the cap refused
    // it: the others took nothing this process could have had.
    const bool device_had_it = fraction && o.free_bytes.value_or(0) >= request;
    const bool decisive = !device_had_it && others + free_b >= request &&
                          others >= std::max(kContextOverhead, request / 2);
    if (others > 0 && (decisive || (total && others * 10 >= total))) {
      FindingEvidence ev;
      ev.held_by_others_bytes = others;
      ev.free_bytes = free_b;
      ev.this_process_bytes = o.live_bytes;
      ev.requested_bytes = request;
      add(decisive ? 0.85 : 0.4, FindingKind::HeldByOthers,
          human_bytes(others) +
              " of the GPU was held by other processes (or the driver) "
              "when it ran out" +
              std::string(decisive ? "; without them the request would fit" : ""),
          ev,
          "Another process uses this GPU (see nvidia-smi): run the job alone on it, or give "
          "each job its own GPU with CUDA_VISIBLE_DEVICES.");
    }
  }
}

// Memory kept across iterations (PyTorch's kept graph or outputs) and growth by site.
void growth_findings(Findings& f) {
  const OomFindingInput& in = f.in;
  const OomEvent& o = f.o;
  const uint64_t request = f.request;
  auto add = [&f](auto&&... a) { f.add(std::forward<decltype(a)>(a)...); };
  // Memory kept across iterations that makes up much of what was live is the cause: reaching
  // the limit, or the cache's pieces, are only how the growth ended.
  const bool kept = in.kept && in.kept->kept_bytes * 4 >= o.live_bytes;
  if (kept) {
    const KeptAcrossIterations& k = *in.kept;
    FindingEvidence ev;
    ev.bytes_per_iteration = k.bytes_per_iteration;
    ev.grown_bytes = k.kept_bytes;
    ev.iterations = k.iterations_keeping;
    ev.live_bytes = o.live_bytes;
    ev.requested_bytes = request;
    for (size_t i = 0; i < k.modules.size() && i < 5; ++i) ev.kept_modules.push_back(k.modules[i]);
    const auto remedies = kept_remedies(k, 0);
    add(0.98, k.kind == KeptKind::Graph ? FindingKind::KeptGraph : FindingKind::KeptOutputs,
        kept_title(k), ev, remedies.empty() ? "" : remedies[0].title + ".");
  }
  if (!in.growth.empty()) {
    uint64_t rate = 0, grown = 0;
    for (const auto& g : in.growth) {
      rate += g.bytes_per_iteration;
      grown += g.bytes;
    }
    const SiteGrowth& top = in.growth[0];
    FindingEvidence ev;
    ev.bytes_per_iteration = rate;
    ev.grown_bytes = grown;
    ev.iterations = top.iterations;
    ev.since_ns = top.since_ns;
    ev.growth_sites.assign(
        in.growth.begin(),
        in.growth.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(in.growth.size(), 5)));
    // Growth that holds most of the memory is the cause, whatever the limit or the cache say;
    // when the forwards' kept memory explains it, that finding says it in PyTorch's terms.
    const double score = kept                        ? 0.5
                         : grown * 2 >= o.live_bytes ? 0.98
                         : grown * 4 >= o.live_bytes ? 0.85
                                                     : 0.5;
    add(score, FindingKind::Growth,
        "Live memory grew by " + human_bytes(rate) + " per iteration since iteration " +
            std::to_string(top.first_iteration) + ", led by " + top.site,
        ev,
        in.torch ? "Memory is kept across iterations: keep Python numbers rather than tensors "
                   "(loss.item(), .detach() before storing), and clear lists of outputs or caches."
                 : "Memory is kept across iterations: free (cudaFree/cudaFreeAsync) what each "
                   "iteration allocates before the next one, or reuse one buffer sized for the "
                   "largest iteration.");
  }
}

// The process was near its limit when it asked.
void near_capacity_finding(Findings& f) {
  const OomFindingInput& in = f.in;
  const OomEvent& o = f.o;
  const uint64_t request = f.request, limit = f.limit;
  const bool fraction = f.fraction;
  auto add = [&f](auto&&... a) { f.add(std::forward<decltype(a)>(a)...); };
  // Under PyTorch's fraction, limit_reached says it (or does not apply: the request fit).
  if (limit && (o.live_bytes + request) * 10 > limit * 8 && !fraction) {
    FindingEvidence ev;
    ev.live_bytes = o.live_bytes;
    ev.limit_bytes = limit;
    ev.requested_bytes = request;
    for (size_t i = 0; i < in.live_by_site.size() && i < 3; ++i)
      ev.top_sites.push_back(in.live_by_site[i]);
    std::string lead = ev.top_sites.empty() ? "" : ", led by " + ev.top_sites[0].first;
    add(0.6, FindingKind::NearCapacity,
        "This process held " + human_bytes(o.live_bytes) + " (" +
            std::to_string(o.live_bytes * 100 / limit) + "% of its limit) when it asked for " +
            human_bytes(request) + lead,
        ev,
        in.torch ? "Use less memory at the peak: activation checkpointing, a smaller batch (with "
                   "gradient accumulation), or mixed precision (bf16/fp16)."
                 : "Use less memory at the peak: process the data in smaller chunks (smaller "
                   "buffers or batches), reuse buffers across steps (a stream-ordered pool, "
                   "cudaMallocAsync, with a release threshold), and free temporaries before the "
                   "largest request.");
  }
}

}  // namespace

std::vector<OomFinding> oom_findings(const OomFindingInput& in) {
  if (!in.oom) return {};
  const OomEvent& o = *in.oom;
  Findings f{in, o};
  f.request = o.allocator && o.allocator_request ? o.allocator_request : o.requested_bytes;
  f.total = o.total_bytes.value_or(0);
  f.free_b = o.free_bytes.value_or(0);
  f.fraction = in.limit && in.limit->kind == "per_process_fraction";
  // Under a tighter limit than the card (PyTorch's per-process fraction) the device's free
  // memory beyond the limit was never available to this process.
  f.limit = f.total;
  limit_findings(f);
  fragmentation_finding(f);
  others_finding(f);
  growth_findings(f);
  near_capacity_finding(f);
  std::vector<OomFinding>& out = f.out;
  std::stable_sort(out.begin(), out.end(),
                   [](const OomFinding& a, const OomFinding& b) { return a.score > b.score; });
  for (size_t i = 0; i < out.size(); ++i) out[i].rank = i + 1;
  return out;
}

std::vector<EvidenceItem> evidence_items(const OomFinding& f) {
  const FindingEvidence& e = f.evidence;
  const bool kept = f.kind == FindingKind::KeptGraph || f.kind == FindingKind::KeptOutputs;
  const std::pair<const char*, const std::optional<uint64_t>*> figures[] = {
      {kept ? "kept per iteration" : "growth per iteration", &e.bytes_per_iteration},
      {"free on the GPU (beyond the limit)", &e.device_free_bytes},
      {"free on the GPU", &e.free_bytes},
      {"reserved by the allocator but free", &e.free_reserved_bytes},
      {kept ? "kept from earlier iterations" : "grown in all", &e.grown_bytes},
      {"held by other processes", &e.held_by_others_bytes},
      {"largest free block", &e.largest_free_block_bytes},
      {"the limit", &e.limit_bytes},
      {"live in this process", &e.live_bytes},
      {"requested", &e.requested_bytes},
      {"held by this process", &e.this_process_bytes},
      {"the GPU's capacity", &e.total_bytes},
  };
  std::vector<EvidenceItem> out;
  for (const auto& [label, value] : figures)
    if (*value) out.push_back({label, **value, {}, {}, {}, {}});
  if (e.free_blocks) out.push_back({"free blocks", {}, *e.free_blocks, {}, {}, {}});
  if (e.external_fragmentation)
    out.push_back({"external fragmentation", {}, {}, {}, *e.external_fragmentation, {}});
  if (e.iterations && *e.iterations >= 0)
    out.push_back({kept ? "iterations kept" : "iterations grown",
                   {},
                   static_cast<uint64_t>(*e.iterations),
                   {},
                   {},
                   {}});
  if (e.since_ns) out.push_back({"growing since", {}, {}, *e.since_ns, {}, {}});
  if (!e.growth_sites.empty()) {
    EvidenceItem sites{"fastest-growing sites", {}, {}, {}, {}, {}};
    for (const auto& g : e.growth_sites) sites.sites.push_back({g.site, g.bytes_per_iteration});
    out.push_back(std::move(sites));
  }
  if (!e.top_sites.empty()) out.push_back({"largest live sites", {}, {}, {}, {}, e.top_sites});
  if (!e.kept_modules.empty())
    out.push_back({"modules that made what was kept", {}, {}, {}, {}, e.kept_modules});
  return out;
}

}  // namespace vramtrace::collector

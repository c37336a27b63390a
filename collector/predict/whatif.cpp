// The what-if entry points (see whatif.h): a process's device replayed, the largest batch that
// fits, a remedy replayed.
#include "collector/predict/whatif.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "collector/ingest/torch_trace.h"
#include "collector/model/model.h"
#include "collector/model/torch_memory.h"
#include "collector/predict/transforms.h"

namespace vramtrace::collector {

std::vector<uint32_t> replayable_devices(const ProcessModel& p) {
  std::vector<uint32_t> out;
  if (!p.torch_context) return out;
  std::set<uint32_t> devs;
  for (const auto& b : p.torch_context->blocks) devs.insert(b.device);
  for (const auto& o : p.torch_context->oom_requests) devs.insert(o.device);
  return {devs.begin(), devs.end()};
}

namespace {

// The process's driver memory outside PyTorch's segments on `device`, as (time, bytes) steps.
std::vector<std::pair<uint64_t, uint64_t>> background_of(const ProcessModel& p, uint32_t device) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto d = p.devices.find(device);
  if (d == p.devices.end() || !p.torch_context) return out;
  std::unordered_set<uint64_t> segments;  // addresses PyTorch's cudaMalloc'd segments had
  bool expandable = false;
  for (const auto& x : p.torch_context->reserves)
    if (x.device == device) {
      if (x.map)
        expandable = true;
      else if (x.delta > 0)
        segments.insert(x.address);
    }
  std::unordered_map<uint64_t, uint64_t> outside;  // id -> bytes
  uint64_t cur = 0;
  for (const auto& c : d->second.driver_log) {
    const bool torch = (c.api == format::Api::cuMemCreate && expandable) || segments.count(c.id);
    if (torch) continue;
    if (c.added) {
      outside[c.id] += c.bytes;
      cur += c.bytes;
    } else if (auto it = outside.find(c.id); it != outside.end()) {
      cur -= std::min(cur, it->second);
      outside.erase(it);
    } else {
      continue;
    }
    if (!out.empty() && out.back().first == c.time_ns)
      out.back().second = cur;
    else
      out.push_back({c.time_ns, cur});
  }
  return out;
}

// A change the hook ran the step with on fake tensors (bf16 autocast, checkpointing): the run's
// own replay scaled by what the change did to the fake step, the ratio of the replays of the step
// with the change and without it, each after what the run recorded before the step. Where the
// run's own step aligns with the fake one, its workspaces (cuDNN's, cuBLAS's: what fake tensors
// miss) are put into both fake steps where they came, and again where a checkpointed forward is
// recomputed: they shape the cache (ResNet-50 checkpointed replayed 1.2 GiB over the real run
// without them, to its reserved peak with them). Where it does not (autocast's other sizes,
// fused kernels), what fake tensors miss errs alike on both sides, so that their ratio is the
// change's. On three real models the ratio came within 10 % of the change applied for real
// where the difference of the two did not (docs/WHATIF.md). Each replay has no limit; the
// result is held against the run's limits.
WhatIfResult replay_change(const ProcessModel& p, uint32_t device, const WhatIfSettings& s,
                           const TorchPredictedStep& changed, const TorchPredictedStep& reference) {
  const TorchContext& ctx = *p.torch_context;
  WhatIfSettings unlimited = s;
  unlimited.limit = UINT64_MAX;
  unlimited.fraction_limit = UINT64_MAX;
  unlimited.transform = nullptr;
  auto fake = [&](const TorchPredictedStep& step) {
    WhatIfSettings f = unlimited;
    f.transform = [&ctx, &step, &changed, &reference](RequestStream& q) {
      q = fake_step_stream(q, ctx, step, &reference, &changed);
      return std::string();
    };
    return replay_run(p, device, f);
  };
  const WhatIfResult with = fake(changed), without = fake(reference);
  WhatIfResult r = replay_run(p, device, unlimited);
  if (!r.ok) return r;
  if (!with.ok || !without.ok) return !with.ok ? with : without;
  // The limits `s` gives: those of the replay above when it asks for none, else a replay's.
  const bool unlimited_asked = s.limit == UINT64_MAX && s.fraction_limit == UINT64_MAX;
  const WhatIfResult limits = unlimited_asked ? r : replay_run(p, device, s);
  auto scaled = [](uint64_t v, uint64_t to, uint64_t from) {
    return from ? static_cast<uint64_t>(std::llround(
                      static_cast<double>(v) * static_cast<double>(to) / static_cast<double>(from)))
                : v;
  };
  // The memory outside PyTorch's segments at the peak stays as the run had it.
  const uint64_t outside =
      r.device_peak_bytes - std::min(r.device_peak_bytes, r.reserved_peak_bytes);
  r.reserved_peak_bytes =
      scaled(r.reserved_peak_bytes, with.reserved_peak_bytes, without.reserved_peak_bytes);
  r.allocated_peak_bytes =
      scaled(r.allocated_peak_bytes, with.allocated_peak_bytes, without.allocated_peak_bytes);
  r.device_peak_bytes = r.reserved_peak_bytes + outside;
  r.limit_bytes = limits.limit_bytes;
  r.limit_source = limits.limit_source;
  r.fraction_limit = limits.fraction_limit;
  r.oom.reset();
  r.over_limit = r.device_peak_bytes > r.limit_bytes ||
                 (r.fraction_limit && r.reserved_peak_bytes > *r.fraction_limit);
  r.fake_step_change =
      FakeStepChange{changed.change, without.reserved_peak_bytes, with.reserved_peak_bytes};
  return r;
}

}  // namespace

WhatIfResult replay_remedy(const ProcessModel& p, uint32_t device, const RemedyChange& change,
                           WhatIfSettings s) {
  const RemedyKindRow& kind = remedy_kind_row(change.kind);
  const TorchMemory* tm = p.torch_memory.get();
  auto refused = [&](const std::string& why) {
    WhatIfResult r;
    r.device = device;
    r.error = why;
    return r;
  };
  // bf16 autocast and checkpointing: the step run on fake tensors with the change, where the
  // hook ran it; else the change made to the recorded requests.
  if (const char* tag = fake_step_change(kind.predicted_by); tag && p.torch_context) {
    const TorchContext& ctx = *p.torch_context;
    const TorchPredictedStep* changed = predicted_change(ctx, device, tag);
    const TorchPredictedStep* reference = predicted_change(ctx, device, "");
    if (changed && reference) return replay_change(p, device, s, *changed, *reference);
  }
  // The hook said why it ran no fake steps (they took too long for the run, their process
  // failed): the transform's figure below says so.
  std::string not_weighed;
  if (fake_step_change(kind.predicted_by) && p.torch_context)
    for (const auto& st : p.torch_context->predicted_steps)
      if (st.device == device && st.change == "none" && st.status != "ok") not_weighed = st.status;
  switch (kind.predicted_by) {
    case PredictedBy::AllocConf: s.alloc_conf = "expandable_segments:True"; break;
    case PredictedBy::HalfBatch: s.scale_batch = 0.5; break;
    case PredictedBy::Bf16Autocast: {
      const bool autocast = tm && tm->autocast();
      s.transform = [autocast](RequestStream& st) { return to_bf16_autocast(st, autocast); };
      break;
    }
    case PredictedBy::CheckpointModules: {
      if (!p.torch_context) return refused("no PyTorch allocator trace");
      const TorchContext& ctx = *p.torch_context;
      const std::vector<std::string> modules = change.modules;
      s.transform = [&ctx, modules](RequestStream& st) {
        return checkpoint_modules(st, ctx, modules);
      };
      break;
    }
    case PredictedBy::WithoutKeptBlocks: {
      const auto& kept = change.kept_blocks;
      s.transform = [&kept](RequestStream& st) { return without_blocks(st, kept); };
      break;
    }
    case PredictedBy::NotReplayed: return refused(kind.not_replayed_because);
  }
  WhatIfResult r = replay_run(p, device, s);
  r.not_weighed_because = not_weighed;
  return r;
}

WhatIfResult replay_run(const ProcessModel& p, uint32_t device, const WhatIfSettings& settings) {
  if (!p.torch_context) {
    WhatIfResult r;
    r.device = device;
    r.error = "no PyTorch allocator trace for process " + std::to_string(p.pid) +
              ": what-if models PyTorch's caching allocator only";
    return r;
  }
  auto d = p.devices.find(device);
  const uint64_t total = d == p.devices.end() ? 0 : d->second.total_bytes;
  return replay(*p.torch_context, p.torch_memory.get(), device, background_of(p, device), total,
                settings);
}

std::optional<MaxBatch> max_batch_scale(const ProcessModel& p, uint32_t device,
                                        WhatIfSettings settings, double lo, double hi) {
  // A step completed by prediction is sized by fake tensors, which do not see the kernels' own
  // scratch: on four real models the completed step's reserved peak came out 0.0 to 4.2 % under
  // the real one, never over, and the largest batch by the bare limit up to 3 samples over what
  // fit for real. Its largest batch is the one whose replay stays kCompletedStepMargin (1.5 %)
  // under the limits, which kept every one of them at or under the real answer (docs/WHATIF.md).
  settings.scale_batch = 1.0;
  if (const WhatIfResult own = replay_run(p, device, settings); own.ok && own.completion) {
    const double keep = 1.0 - kCompletedStepMargin;
    if (own.fraction_limit)
      settings.fraction_limit =
          static_cast<uint64_t>(static_cast<double>(*own.fraction_limit) * keep);
    if (own.limit_bytes != UINT64_MAX)
      settings.limit = static_cast<uint64_t>(static_cast<double>(own.limit_bytes) * keep);
  }
  settings.scale_batch = lo;
  WhatIfResult at_lo = replay_run(p, device, settings);
  if (!at_lo.fits()) return std::nullopt;
  settings.scale_batch = hi;
  WhatIfResult at_hi = replay_run(p, device, settings);
  if (at_hi.fits()) return MaxBatch{hi, std::move(at_hi)};
  MaxBatch best{lo, std::move(at_lo)};
  // Bisection on the scale: what fits is monotone in it but for the allocator's rounding.
  while (hi - lo > 0.001 * lo) {
    const double mid = (lo + hi) / 2;
    settings.scale_batch = mid;
    WhatIfResult r = replay_run(p, device, settings);
    if (r.fits()) {
      lo = mid;
      best = {mid, std::move(r)};
    } else {
      hi = mid;
    }
  }
  return best;
}

uint64_t largest_batch_size(const ProcessModel& p, uint32_t device, const MaxBatch& best,
                            uint64_t recorded, const WhatIfSettings& settings) {
  // Whether the step at `batch` fits as max_batch_scale decides it (the completed step's margin
  // included): a bisection between the same scale on both ends.
  const auto fits = [&](uint64_t batch) {
    const double scale = static_cast<double>(batch) / static_cast<double>(recorded);
    return max_batch_scale(p, device, settings, scale, scale).has_value();
  };
  if (!recorded) return 0;
  auto n = static_cast<uint64_t>(std::floor(best.scale * static_cast<double>(recorded)));
  for (int more = 0; more < 4 && fits(n + 1); ++more) ++n;
  return n;
}

}  // namespace vramtrace::collector

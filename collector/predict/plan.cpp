// `vramtrace plan`'s analysis (see plan.h): the completed first step replayed under the run's
// limit, the largest batch that fits and the remedies, for each process the hook stopped.
#include "collector/predict/plan.h"

#include <algorithm>
#include <set>

#include "collector/ingest/torch_trace.h"
#include "collector/model/model.h"
#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

namespace {

uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

WhatIfSettings unlimited() {
  WhatIfSettings s;
  s.limit = UINT64_MAX;
  s.fraction_limit = UINT64_MAX;
  return s;
}

// The largest batch that fits (largest_batch_size), kCompletedStepMargin kept free.
void largest_batch(const ProcessModel& p, uint32_t device, uint64_t recorded, DevicePlan& d) {
  if (!recorded) return;
  const auto mb = max_batch_scale(p, device, {});
  if (!mb) return;
  if (mb->scale >= kMaxBatchScaleTop) {
    d.largest_batch = static_cast<uint64_t>(kMaxBatchScaleTop) * recorded;
    d.largest_at_least = true;
    return;
  }
  if (const uint64_t n = largest_batch_size(p, device, *mb, recorded)) d.largest_batch = n;
}

// A plan's remedy in a few words (the change the program makes).
std::string label_of(RemedyKind kind) {
  switch (kind) {
    case RemedyKind::SmallerBatch: return "halve the batch";
    case RemedyKind::MixedPrecision: return "bf16 autocast";
    case RemedyKind::ActivationCheckpointing: return "checkpoint the repeated blocks";
    case RemedyKind::ExpandableSegments: return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
    default: return remedy_kind_row(kind).name;
  }
}

PlanRemedy remedy(const ProcessModel& p, uint32_t device, RemedyKind kind) {
  PlanRemedy r;
  r.kind = kind;
  r.label = label_of(kind);
  const RemedyChange change{kind};
  const WhatIfResult w = replay_remedy(p, device, change);
  if (!w.ok) {
    r.not_replayed_because = w.error;
    return r;
  }
  r.replayed = true;
  r.fits = w.fits();
  // As the report's remedies: under the limit PyTorch frees its cache and retries before it
  // fails, so what fits may peak lower than what it takes with no limit.
  const WhatIfResult needs = replay_remedy(p, device, change, unlimited());
  r.peak_bytes = w.fits() || !needs.ok ? w.device_peak_bytes : needs.device_peak_bytes;
  return r;
}

}  // namespace

DevicePlan device_plan(const ProcessModel& p, uint32_t device) {
  DevicePlan d;
  d.device = device;
  if (!p.torch_context) {
    d.error = "no PyTorch allocator trace";
    return d;
  }
  const TorchContext& ctx = *p.torch_context;
  if (ctx.plan_stop) d.batch = ctx.plan_stop->batch;
  std::set<uint64_t> batches;
  std::string failed;
  for (const auto& st : ctx.predicted_steps) {
    if (st.device != device) continue;
    if (st.status == "ok" && st.change.empty() && !st.requests.empty()) batches.insert(st.batch);
    if (st.status != "ok" && failed.empty()) failed = st.status;
    if (!d.batch) d.batch = st.recorded_batch;
  }
  d.predicted_batches.assign(batches.begin(), batches.end());
  if (!has_predicted_step(ctx, device)) {
    d.error = failed.empty() ? "no step was predicted" : failed;
    return d;
  }
  const WhatIfResult own = replay_run(p, device, {});
  const WhatIfResult needs = replay_run(p, device, unlimited());
  if (!own.ok || !needs.ok) {
    d.error = !own.ok ? own.error : needs.error;
    return d;
  }
  d.predicted = true;
  d.fits = own.fits();
  // As a remedy's figure: under the limit PyTorch frees its cache and retries before it fails,
  // so a step that fits may peak lower there than with no limit; one that does not fit is said
  // by what it needs.
  const WhatIfResult& figure = d.fits ? own : needs;
  d.reserved_peak_bytes = figure.reserved_peak_bytes;
  d.peak_bytes = std::max(figure.device_peak_bytes, figure.reserved_peak_bytes);
  d.outside_bytes = d.peak_bytes - d.reserved_peak_bytes;
  d.limit_bytes = own.limit_bytes;
  d.limit_source = own.limit_source;
  d.fraction_limit_bytes = own.fraction_limit;
  if (d.fits) {
    d.free_bytes = minus(d.limit_bytes, own.device_peak_bytes);
    if (own.fraction_limit)
      d.free_bytes = std::min(d.free_bytes, minus(*own.fraction_limit, own.reserved_peak_bytes));
  } else {
    d.over_bytes = minus(d.peak_bytes, d.limit_bytes);
    if (own.fraction_limit)
      d.over_bytes = std::max(d.over_bytes, minus(d.reserved_peak_bytes, *own.fraction_limit));
  }
  const uint64_t recorded =
      own.completion && own.completion->recorded_batch ? own.completion->recorded_batch : d.batch;
  largest_batch(p, device, recorded, d);

  if (recorded >= 2) d.remedies.push_back(remedy(p, device, RemedyKind::SmallerBatch));
  if (predicted_change(ctx, device, "bf16_autocast"))
    d.remedies.push_back(remedy(p, device, RemedyKind::MixedPrecision));
  if (predicted_change(ctx, device, "checkpoint"))
    d.remedies.push_back(remedy(p, device, RemedyKind::ActivationCheckpointing));
  if (own.conf.find("expandable_segments:True") == std::string::npos)
    d.remedies.push_back(remedy(p, device, RemedyKind::ExpandableSegments));
  // A change replayed to no lower peak is no remedy (checkpointing a model that checkpoints its
  // blocks already): not offered.
  const auto no_saving = [&d](const PlanRemedy& r) {
    return r.replayed && r.peak_bytes >= d.peak_bytes;
  };
  d.remedies.erase(std::remove_if(d.remedies.begin(), d.remedies.end(), no_saving),
                   d.remedies.end());
  return d;
}

std::vector<ProcessPlan> plans_of(const Run& run) {
  std::vector<ProcessPlan> out;
  for (const ProcessModel& p : run.processes) {
    if (!p.torch_context || !p.torch_context->plan_stop) continue;
    const TorchContext& ctx = *p.torch_context;
    const TorchPlanStop& stop = *ctx.plan_stop;
    ProcessPlan pp;
    pp.pid = p.pid;
    pp.stopped_ns = stop.time_ns;
    pp.batch = stop.batch;
    pp.spent_ns = stop.spent_ns;
    pp.rng_restored = stop.rng_restored;
    pp.loss = stop.loss;
    pp.notes = ctx.plan_notes;
    std::set<uint32_t> devices;
    for (const auto& st : ctx.predicted_steps) {
      devices.insert(st.device);
      if (st.status == "ok") continue;
      std::string what = "the step";
      if (st.batch) what += " at batch " + std::to_string(st.batch);
      if (!st.change.empty() && st.change != "none") what += " with " + st.change;
      pp.unseen.push_back(what + ": " + st.status);
    }
    if (stop.loss == "cross_entropy")
      pp.unseen.push_back(
          "the model returned no loss: a cross-entropy over its output's last dimension was "
          "assumed");
    else if (stop.loss == "sum")
      pp.unseen.push_back("the model returned no loss: the sum of its output was assumed");
    // The program's own loop ran the steps (its loss, zero_grad, scaler and accumulation as
    // it does them): nothing of those is assumed.
    if (stop.loss != "program") {
      for (const std::string& a : ctx.step_assumptions) pp.unseen.push_back(a);
      pp.unseen.push_back(
          "gradients assumed set to none at zero_grad (PyTorch's default; set_to_none=False "
          "keeps them)");
    }
    pp.unseen.push_back(
        "cuBLAS and cuDNN workspaces and the kernels' own scratch: fake tensors do not see them "
        "(the largest batch keeps 1.5 % of the limit free for them)");
    for (uint32_t dev : devices) pp.devices.push_back(device_plan(p, dev));
    out.push_back(std::move(pp));
  }
  return out;
}

}  // namespace vramtrace::collector

// `vramtrace run --preflight`'s analysis (see preflight.h): the predicted first step held against
// the same step recorded, and the verdict said at the pre-flight's moment.
#include "collector/predict/preflight.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "collector/ingest/torch_trace.h"
#include "collector/model/model.h"
#include "collector/predict/whatif.h"
#include "common/bytes_text.h"
#include "common/printable.h"

namespace vramtrace::collector {

namespace {

// The time the predicted step of `device` began (the real step's first forward), 0: none.
uint64_t step_start(const TorchContext& ctx, uint32_t device) {
  uint64_t t = 0;
  for (const auto& st : ctx.predicted_steps)
    if (st.device == device && st.status == "ok" && st.change.empty() && (!t || st.time_ns < t))
      t = st.time_ns;
  return t;
}

// PyTorch's reserved peak recorded from `from` to the end of the second optimizer step after it
// (the two iterations the fake step runs), or why it cannot be compared.
void recorded_step(const TorchContext& ctx, uint32_t device, uint64_t from, PreflightDevice& d) {
  std::vector<uint64_t> ends;
  for (const TorchMark& m : ctx.marks)
    if (m.kind == MarkKind::StepEnd && m.id == 1 && m.time_ns >= from) ends.push_back(m.time_ns);
  const uint64_t to = ends.size() >= 2 ? ends[1] : UINT64_MAX;
  for (uint64_t t : ctx.ooms)
    if (t >= from && t <= to) {
      d.not_compared_because = "the step ran out of memory";
      return;
    }
  if (ends.size() < 2) {
    d.not_compared_because =
        "the program ran " + std::to_string(ends.size()) +
        " optimizer step(s) after the pre-flight; the prediction covers the first two";
    return;
  }
  if (auto w = ctx.window_start.find(device); w != ctx.window_start.end() && w->second > from) {
    d.not_compared_because = "PyTorch's trace ring had dropped the step's start";
    return;
  }
  for (const TorchGap& g : ctx.gaps)
    if (g.device == device && g.start_ns < to && g.end_ns > from) {
      d.not_compared_because = "PyTorch's trace was off during the step (sampled)";
      return;
    }
  // What was reserved when the step began, then its highest until the second step's end.
  int64_t at_start = 0;
  for (const TorchReserve& x : ctx.reserves) {
    if (x.time_ns >= from) break;
    if (x.device == device) at_start += x.delta;
  }
  int64_t in_step = at_start;
  int64_t reserved = at_start;
  for (const TorchReserve& x : ctx.reserves) {
    if (x.time_ns < from || x.device != device) continue;
    if (x.time_ns > to) break;
    reserved += x.delta;
    in_step = std::max(in_step, reserved);
  }
  d.compared = true;
  d.from_ns = from;
  d.to_ns = to;
  d.recorded_reserved_peak_bytes = in_step > 0 ? static_cast<uint64_t>(in_step) : 0;
  if (d.recorded_reserved_peak_bytes)
    d.error_percent = (static_cast<double>(d.predicted_reserved_peak_bytes) -
                       static_cast<double>(d.recorded_reserved_peak_bytes)) /
                      static_cast<double>(d.recorded_reserved_peak_bytes) * 100.0;
}

std::string where(const std::vector<uint32_t>& devices, uint32_t device) {
  return devices.size() > 1 ? "device " + std::to_string(device) + ": " : std::string();
}

}  // namespace

std::vector<uint32_t> preflight_devices(const ProcessModel& p) {
  std::set<uint32_t> out;
  if (p.torch_context)
    for (const auto& st : p.torch_context->predicted_steps) out.insert(st.device);
  return {out.begin(), out.end()};
}

PreflightDevice preflight_device(const ProcessModel& p, uint32_t device) {
  PreflightDevice d;
  d.device = device;
  if (!p.torch_context || !p.torch_context->preflight) {
    d.error = "no pre-flight";
    return d;
  }
  const TorchContext& ctx = *p.torch_context;
  d.batch = ctx.preflight->batch;
  std::string failed;
  for (const auto& st : ctx.predicted_steps)
    if (st.device == device && st.status != "ok" && failed.empty()) failed = st.status;
  const uint64_t from = step_start(ctx, device);
  if (!from || !has_predicted_step(ctx, device)) {
    d.error = failed.empty() ? "no step was predicted" : failed;
    return d;
  }
  // As the plan figures its step (collector/predict/plan.cpp's device_plan).
  WhatIfSettings own_settings;
  own_settings.preflight_prediction = true;
  WhatIfSettings unlimited = own_settings;
  unlimited.limit = UINT64_MAX;
  unlimited.fraction_limit = UINT64_MAX;
  const WhatIfResult own = replay_run(p, device, own_settings);
  const WhatIfResult needs = replay_run(p, device, unlimited);
  if (!own.ok || !needs.ok) {
    d.error = !own.ok ? own.error : needs.error;
    return d;
  }
  d.predicted = true;
  d.predicted_fits = own.fits();
  const WhatIfResult& figure = d.predicted_fits ? own : needs;
  d.predicted_reserved_peak_bytes = figure.reserved_peak_bytes;
  d.predicted_peak_bytes = std::max(figure.device_peak_bytes, figure.reserved_peak_bytes);
  d.limit_bytes = own.limit_bytes;
  recorded_step(ctx, device, from, d);
  return d;
}

std::vector<ProcessPreflight> preflights_of(const Run& run) {
  std::vector<ProcessPreflight> out;
  for (const ProcessModel& p : run.processes) {
    if (!p.torch_context || !p.torch_context->preflight) continue;
    const TorchPlanStop& at = *p.torch_context->preflight;
    ProcessPreflight pp;
    pp.pid = p.pid;
    pp.time_ns = at.time_ns;
    pp.batch = at.batch;
    pp.spent_ns = at.spent_ns;
    pp.rng_restored = at.rng_restored;
    pp.loss = at.loss;
    pp.assumed = p.torch_context->step_assumptions;
    for (uint32_t dev : preflight_devices(p)) pp.devices.push_back(preflight_device(p, dev));
    out.push_back(std::move(pp));
  }
  return out;
}

namespace {

// What the stand-in step took for the program's own (its loss, the loop's shape), said under
// the verdict as it comes: a loop it does not know (its own loss, several forwards a step,
// accumulation) can need far more or less than the stand-in.
std::string standin_said(const std::string& loss, const std::vector<std::string>& assumed) {
  std::string said = "predicted with a stand-in for the program's step: ";
  if (loss == "cross_entropy")
    said += "a cross-entropy over the output's last dimension (the model returned no loss), ";
  else if (loss == "sum")
    said += "the sum of the output as its loss (the model returned no loss), ";
  else if (loss == "model")
    said += "the model's own loss, ";
  said += "one forward and backward per optimizer step, gradients set to none at zero_grad";
  for (const std::string& a : assumed) said += "; " + printable(a);  // names from the program
  return said + "; `vramtrace plan` runs the program's own loop instead\n";
}

}  // namespace

std::string preflight_verdict(const ProcessModel& p, bool* more) {
  const std::string head = "vramtrace: PRE-FLIGHT: ";
  const std::vector<uint32_t> devices = preflight_devices(p);
  if (devices.empty()) return head + "no step was predicted\n";
  // Whose step it was: the program's own loop (run in a copy of the process) or, unsaid, the
  // stand-in step, whose assumptions the report lists.
  const bool own = p.torch_context && p.torch_context->preflight &&
                   p.torch_context->preflight->loss == "program";
  const std::string own_loop = "the program's own loop on fake tensors";
  std::string out;
  for (uint32_t dev : devices) {
    const DevicePlan d = device_plan(p, dev);
    const std::string at = where(devices, dev);
    if (!d.predicted) {
      out += head + at + "no prediction: " + d.error + "\n";
      continue;
    }
    const bool by_fraction = d.fraction_limit_bytes && *d.fraction_limit_bytes < d.limit_bytes;
    const std::string limit =
        by_fraction ? "PyTorch's per-process fraction of " + human_bytes(*d.fraction_limit_bytes)
                    : "a limit of " + human_bytes(d.limit_bytes);
    if (d.fits) {
      out += head + at + "the first step (batch " + std::to_string(d.batch) +
             (own ? ", " + own_loop : "") + ") will peak at " + human_bytes(d.peak_bytes) +
             " against " + limit + ": it fits, " + human_bytes(d.free_bytes) + " to spare\n";
      continue;
    }
    std::string line = head + at + "the first step" + (own ? " (" + own_loop + ")" : "") +
                       " will need " + human_bytes(d.peak_bytes) + " against " + limit +
                       ": it will run out of memory; ";
    if (more) {
      *more = true;
      out += line + "the largest batch that fits and the remedies follow\n";
      continue;
    }
    if (d.largest_batch)
      line += "the largest batch that fits is " +
              std::string(d.largest_at_least ? "at least " : "") +
              std::to_string(*d.largest_batch) + " (this one: " + std::to_string(d.batch) + ")";
    else
      line += "no batch fits, down to 1 % of this one (" + std::to_string(d.batch) + ")";
    std::string remedies;
    for (const PlanRemedy& r : d.remedies) {
      if (!r.replayed) continue;
      remedies += (remedies.empty() ? "" : ", ") + r.label + " " + human_bytes(r.peak_bytes) +
                  (r.fits ? " (fits)" : " (runs out)");
    }
    if (!remedies.empty()) line += "; remedies: " + remedies;
    out += line + "\n";
  }
  // Once, under the verdict that ends the pre-flight (not under a first stage that asks for more).
  if (!own && p.torch_context && p.torch_context->preflight && !out.empty() && !(more && *more))
    out += head + standin_said(p.torch_context->preflight->loss, p.torch_context->step_assumptions);
  return out;
}

}  // namespace vramtrace::collector

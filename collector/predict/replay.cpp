// The replay (see replay.h): the stream built and transformed, the settings and limits
// resolved from what the run recorded and what was asked, then the requests run through the
// allocator's model in order.
#include "collector/predict/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "collector/ingest/torch_trace.h"
#include "collector/model/torch_memory.h"
#include "common/bytes_text.h"

namespace vramtrace::collector {

namespace {

using Steps = std::vector<std::pair<uint64_t, uint64_t>>;

// The value of (time, value) steps at `t`, reading on from `pos` (times only move forward).
uint64_t step_at(const Steps& steps, size_t& pos, uint64_t t) {
  while (pos < steps.size() && steps[pos].first <= t) ++pos;
  return pos ? steps[pos - 1].second : 0;
}

// The settings: the run's own (recorded, else inferred from its trace), then those asked for
// over them. False (with r.error) on a bad --alloc-conf.
bool resolve_settings(const TorchContext& ctx, uint32_t device, const WhatIfSettings& settings,
                      WhatIfResult& r) {
  AllocatorSettings s;
  bool any_map = false;
  for (const auto& x : ctx.reserves) any_map |= x.device == device && x.map;
  if (ctx.alloc_conf) {
    std::string why;
    AllocatorSettings rec;
    // PyTorch refuses settings it cannot read, so a run went on under these only if they are
    // right: one this model cannot read is not what ran (a damaged line, or a setting of a
    // later PyTorch), and a replay under the defaults instead is said to be one.
    if (parse_alloc_conf(*ctx.alloc_conf, &rec, &why))
      s = rec;
    else
      r.problems.push_back("the run's recorded allocator settings '" + *ctx.alloc_conf +
                           "' cannot be read (" + why +
                           "): replayed under PyTorch's defaults, which are not what ran");
    r.recorded_conf = *ctx.alloc_conf;
    r.conf_source = "recorded";
  } else if (any_map) {
    s.expandable_segments = true;
    r.recorded_conf = "expandable_segments:True";
    r.conf_source = "inferred from the trace (segments mapped piecewise)";
  } else {
    r.conf_source = "not recorded: PyTorch's defaults assumed";
  }
  if (settings.alloc_conf && !parse_alloc_conf(*settings.alloc_conf, &s, &r.error)) return false;
  r.settings = s;
  r.conf = describe_settings(s);
  return true;
}

// The limits: what the process may hold on the device (asked, else measured at a recorded OOM,
// else the capacity less an estimate for the context) and PyTorch's per-process fraction (asked,
// else the run's own); and the recorded reserved peak.
void resolve_limits(const TorchContext& ctx, uint32_t device, const Steps& background,
                    uint64_t device_total, const WhatIfSettings& settings, WhatIfResult& r) {
  Steps reserved;  // the recorded reserved bytes over time
  {
    int64_t cur = 0, peak = 0;
    for (const auto& x : ctx.reserves)
      if (x.device == device) {
        cur += x.delta;
        peak = std::max(peak, cur);
        reserved.push_back({x.time_ns, static_cast<uint64_t>(std::max<int64_t>(cur, 0))});
      }
    r.recorded_reserved_peak_bytes = static_cast<uint64_t>(peak);
  }
  if (settings.limit) {
    r.limit_bytes = *settings.limit;
    r.limit_source = "--limit";
  } else {
    const TorchOomRequest* measured = nullptr;
    for (const auto& o : ctx.oom_requests)
      if (o.device == device && o.device_free != UINT64_MAX) {
        measured = &o;
        break;
      }
    if (measured) {
      size_t bp = 0, rp = 0;
      r.limit_bytes = measured->device_free + step_at(background, bp, measured->time_ns) +
                      step_at(reserved, rp, measured->time_ns);
      r.limit_source =
          "measured at the recorded OOM (the device's free memory then, plus what the process "
          "held)";
    } else if (device_total) {
      const uint64_t reserve = driver_reserve_estimate(device_total);
      r.limit_bytes = device_total - reserve;
      r.limit_source = "the device's capacity less an estimated " + mib_text(reserve) +
                       " for the CUDA context (no OOM recorded to measure it)";
    } else {
      r.limit_bytes = UINT64_MAX;
      r.limit_source = "unknown (the device's capacity was not recorded): no limit";
    }
  }
  const AllocatorSettings& s = r.settings;
  if (settings.fraction_limit) {
    r.fraction_limit = settings.fraction_limit;
  } else if (s.per_process_memory_fraction && device_total) {
    r.fraction_limit =
        static_cast<uint64_t>(*s.per_process_memory_fraction * static_cast<double>(device_total));
  } else if (auto it = ctx.limits.find(device); it != ctx.limits.end() && it->second.fraction < 1) {
    const uint64_t total = it->second.total_bytes ? it->second.total_bytes : device_total;
    if (total)
      r.fraction_limit = static_cast<uint64_t>(it->second.fraction * static_cast<double>(total));
  }
}

// What the first request the model could not serve met, and where it was made: a recorded
// request's iteration, module and phase are those running at its time, a predicted one's its own.
WhatIfOom oom_of(const Request& q, uint64_t index, const CachingAllocatorModel& model,
                 const TorchMemory* tm, const TorchContext& ctx) {
  WhatIfOom o;
  o.requested_bytes = q.bytes;
  o.rounded_bytes = model.round_size(q.bytes);
  o.time_ns = q.time_ns;
  o.stream = q.stream;
  o.request_index = index;
  o.recorded_request = q.op == RequestOp::RecordedOom;
  o.state = model.state();
  if (q.predicted) {
    o.iteration = q.iteration;
    if (q.module && q.module <= ctx.modules.size()) o.module = ctx.modules[q.module - 1].name;
    o.phase = phase_key(q.phase);
  } else if (tm) {
    o.iteration = tm->iteration_at(q.time_ns);
    o.module = tm->module_name(tm->module_at(q.time_ns));
    if (const PhaseSpan* ph = tm->phase_at(q.time_ns)) o.phase = phase_key(ph->phase);
  }
  return o;
}

// CUDA aligns every allocation to 256 bytes at least and PyTorch's blocks are multiples of 512
// inside its segments: a block elsewhere is no allocator's, and the trace is not as PyTorch
// wrote it (the replay, which pairs blocks by address only, cannot tell what else changed).
std::vector<std::string> unaligned_blocks(const TorchContext& ctx, uint32_t device) {
  uint64_t count = 0, first = 0;
  for (const TorchBlock& b : ctx.blocks)
    if (b.device == device && b.address % 256 != 0 && !count++) first = b.address;
  if (!count) return {};
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(first));
  return {std::to_string(count) + " of PyTorch's recorded blocks are at addresses no CUDA " +
          "allocation has (not a multiple of 256; the first at " + hex +
          "): the trace is not as PyTorch wrote it"};
}

// The loop: each request in order through the model, until the first it cannot serve.
void run_stream(const RequestStream& s, CachingAllocatorModel& model, const Steps& background,
                const TorchMemory* tm, const TorchContext& ctx, WhatIfResult& r) {
  std::vector<int64_t> handle(s.blocks, -1);
  size_t bg_pos = 0;
  uint64_t index = 0;
  const auto& q = s.requests;
  for (size_t e = 0; e < q.size(); ++e) {
    const Request& x = q[e];
    if (x.op == RequestOp::Free) {
      model.free(handle[x.block]);
      handle[x.block] = -1;
      ++r.frees;
      continue;
    }
    const uint64_t bg = step_at(background, bg_pos, x.time_ns);
    r.background_peak_bytes = std::max(r.background_peak_bytes, bg);
    model.set_background(bg);
    ++r.requests;
    if (x.scaled) ++r.scaled_requests;
    if (x.predicted) ++r.predicted_requests_replayed;
    const int64_t h = model.malloc(x.bytes, x.stream);
    if (h < 0) {
      r.oom = oom_of(x, index, model, tm, ctx);
      break;
    }
    r.device_peak_bytes = std::max(r.device_peak_bytes, model.reserved() + bg);
    if (x.op == RequestOp::Malloc) {
      handle[x.block] = h;
    } else {
      // The request the run itself failed on, served: the program would have gone on with it.
      // What it did next was never recorded when it died there (unless a predicted step says);
      // a program that caught the error went on without it.
      model.free(h);
      bool more = false;
      for (size_t k = e + 1; k < q.size() && !more; ++k) more = q[k].op == RequestOp::Malloc;
      if (!more) r.truncated_at_recorded_oom = true;
    }
    ++index;
  }
  r.requests_replayed = index;
  r.reserved_peak_bytes = model.peak_reserved();
  r.allocated_peak_bytes = model.peak_allocated();
}

}  // namespace

namespace {

// The time the predicted step of `device` began (the first of its steps'), UINT64_MAX: none.
uint64_t preflight_step_start(const TorchContext& ctx, uint32_t device) {
  uint64_t t = UINT64_MAX;
  for (const auto& st : ctx.predicted_steps)
    if (st.device == device && st.status == "ok" && st.change.empty()) t = std::min(t, st.time_ns);
  return t;
}

// Whether the run recorded a request at `t` or later.
bool ran_past(const RequestStream& s, uint64_t t) {
  return !s.requests.empty() && s.requests.back().time_ns >= t;
}

// Whether the allocator ran out of memory before the first optimizer step ended (or with none).
bool died_in_first_step(const TorchContext& ctx) {
  if (ctx.ooms.empty()) return false;
  uint64_t end = UINT64_MAX;
  for (const TorchMark& m : ctx.marks)
    if (m.kind == MarkKind::StepEnd && m.id == 1) {
      end = m.time_ns;
      break;
    }
  return ctx.ooms.front() < end;
}

}  // namespace

WhatIfResult replay(const TorchContext& ctx, const TorchMemory* tm, uint32_t device,
                    const Steps& background, uint64_t device_total,
                    const WhatIfSettings& settings) {
  WhatIfResult r;
  r.device = device;
  r.torch_version = ctx.torch_version;
  r.scale_batch = settings.scale_batch;
  r.rules =
      "CUDACachingAllocator.cpp of PyTorch 2.5 to 2.11 (max_non_split_rounding_mb and "
      "expandable segments' per-stream 2 MiB / 20 MiB pages); the run used PyTorch " +
      (ctx.torch_version.empty() ? std::string("(version not recorded)") : ctx.torch_version);
  if (tm && &tm->context() != &ctx) tm = nullptr;  // the categories must be of these blocks

  r.problems = unaligned_blocks(ctx, device);
  RequestStream s = recorded_stream(ctx, tm, device);
  r.window_lost = s.window_lost;
  r.trace_sampled = s.trace_sampled;
  r.recorded_oom = s.recorded_oom;
  if (s.requests.empty()) {
    r.error = "no PyTorch allocator requests on device " + std::to_string(device);
    return r;
  }
  bool predicted = has_predicted_step(ctx, device);
  if (predicted && ctx.preflight) {
    // A pre-flight predicted the step before it ran: its prediction stands for the step where
    // the run never finished it (an OOM before the first optimizer step ended), or when asked;
    // a step the run recorded whole is replayed as recorded.
    if (settings.preflight_prediction) {
      const uint64_t t0 = preflight_step_start(ctx, device);
      size_t keep = 0;
      while (keep < s.requests.size() && s.requests[keep].time_ns < t0) ++keep;
      s.requests.resize(keep);
    } else if (ran_past(s, ctx.preflight->time_ns) && !died_in_first_step(ctx)) {
      predicted = false;
    }
  } else if (settings.preflight_prediction) {
    r.error = "no pre-flight prediction on device " + std::to_string(device);
    return r;
  }
  if (settings.scale_batch != 1.0 && !tm && !predicted) {
    r.error =
        "--scale-batch needs the memory's categories (activations, inputs...), which the "
        "start-up hook did not record for this run (no nn.Module, forward or backward seen)";
    return r;
  }
  if (!(settings.scale_batch > 0) || !std::isfinite(settings.scale_batch)) {
    r.error = "the batch scale must be a positive number";
    return r;
  }
  if (!resolve_settings(ctx, device, settings, r)) return r;
  resolve_limits(ctx, device, background, device_total, settings, r);

  s = predicted ? completed_stream(s, ctx, device, settings.scale_batch)
                : scale_batch(std::move(s), settings.scale_batch);
  r.completion = s.completion;
  r.problems.insert(r.problems.end(), s.problems.begin(), s.problems.end());
  if (settings.transform) {
    r.error = settings.transform(s);
    if (!r.error.empty()) return r;
  }
  CachingAllocatorModel model(r.settings, r.limit_bytes, r.fraction_limit,
                              device_total ? device_total : r.limit_bytes);
  run_stream(s, model, background, tm, ctx, r);
  r.ok = true;
  return r;
}

}  // namespace vramtrace::collector

// The replay: a device's request stream (collector/predict/request_stream.h) run through the
// model of PyTorch's caching allocator (collector/predict/allocator_model.h) under the run's
// settings or others, a limit and a batch scale, with the process's memory outside PyTorch's
// segments as background over time. Its answer: whether it fits, the reserved peak, the first
// request the model could not serve.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collector/predict/allocator_model.h"
#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

struct WhatIfSettings {
  // Over the settings the run used (its recorded PYTORCH_CUDA_ALLOC_CONF, or inferred).
  std::optional<std::string> alloc_conf;
  // What the process may hold on the device (PyTorch's segments plus the background); unset:
  // the device's capacity less what the driver kept for itself, as measured at a recorded
  // OOM (else kDriverReserveEstimate).
  std::optional<uint64_t> limit;
  // torch.cuda.set_per_process_memory_fraction's allowed maximum; unset: the run's own.
  std::optional<uint64_t> fraction_limit;
  double scale_batch = 1.0;  // activations, temporaries and inputs scale; the rest does not
  // A remedy's change of the program's requests (collector/predict/transforms.h), applied
  // after the batch scale; its words say what it did, or why it could not ("" when it could).
  std::function<std::string(RequestStream&)> transform;
  // `vramtrace run --preflight`'s prediction: the requests recorded before the predicted step
  // began, then that step, as the pre-flight replayed them before the step ran (what the run
  // recorded from the step on is left out).
  bool preflight_prediction = false;
};

// What the CUDA context and the driver keep on a device beyond the allocations a process makes
// when no recorded OOM tells (the free memory then): an estimate, said in the result; on a
// device of less than 8 GiB (the CPU stand-in's), a sixteenth of it.
inline constexpr uint64_t kDriverReserveEstimate = 512ull << 20;
inline uint64_t driver_reserve_estimate(uint64_t device_total) {
  return std::min(kDriverReserveEstimate, device_total / 16);
}

struct WhatIfOom {
  uint64_t requested_bytes = 0;  // as the program asked (the allocator's rounding not applied)
  uint64_t rounded_bytes = 0;
  uint64_t time_ns = 0;  // on the traced host's CLOCK_MONOTONIC, like the model's
  uint64_t stream = 0;
  int64_t iteration = -1;         // -1: unknown (no iterations)
  std::string module;             // the nn.Module running then, "" when unknown
  std::string phase;              // forward, backward, optimizer, evaluation, ""
  uint64_t request_index = 0;     // which of the device's requests (0-based, recorded order)
  bool recorded_request = false;  // the run's own failed request (the OOM the run had)
  AllocatorState state;           // what the request met (after the allocator's retries)
};

// A change (common/side_channel.h's V line) and the reserved peaks of the step run on fake
// tensors without it and with it, each after what the run recorded before the step.
struct FakeStepChange {
  std::string change;  // "bf16_autocast", "checkpoint"
  uint64_t without_bytes = 0, with_bytes = 0;
};

struct WhatIfResult {
  bool ok = false;  // false: nothing to replay (error says why)
  std::string error;
  uint32_t device = 0;
  std::string torch_version;
  std::string rules;          // which PyTorch rules were used
  std::string recorded_conf;  // the settings the run used ("" default), and how known
  std::string conf_source;    // "recorded", "inferred from the trace", "default"
  std::string conf;           // the settings replayed
  AllocatorSettings settings;
  uint64_t limit_bytes = 0;  // the device's limit used
  std::string limit_source;  // "--limit", "measured at the recorded OOM", "estimated"
  std::optional<uint64_t> fraction_limit;
  double scale_batch = 1.0;
  uint64_t requests = 0, frees = 0, requests_replayed = 0;
  uint64_t scaled_requests = 0;  // requests whose size the batch scale changed
  uint64_t reserved_peak_bytes = 0, allocated_peak_bytes = 0;
  uint64_t background_peak_bytes = 0;
  uint64_t recorded_reserved_peak_bytes = 0;  // the run's own, from its trace
  bool recorded_oom = false;
  std::optional<WhatIfOom> oom;  // the first request the model could not serve
  // The recorded run ended at its own OOM, which the replay served: what came after was never
  // recorded, so "fits" holds up to that point only.
  bool truncated_at_recorded_oom = false;
  bool window_lost = false;  // PyTorch's trace ring had dropped its start
  // The trace was off between sampled iterations: a gap's blocks are replayed as freed at its
  // start and made at its end.
  bool trace_sampled = false;
  // The most the process held on the device at once in the replay: PyTorch's segments plus
  // the memory outside them then.
  uint64_t device_peak_bytes = 0;
  // The step that never finished, completed by prediction (the hook's fake-tensor run).
  std::optional<Completion> completion;
  uint64_t predicted_requests_replayed = 0;
  // A remedy's change weighed on the step run on fake tensors (collector/whatif.cpp): the peaks
  // are the run's replay scaled by it; no request is known to fail, `over_limit` says whether
  // they pass the limits.
  std::optional<FakeStepChange> fake_step_change;
  // Why a remedy that is weighed on fake steps where the hook ran them was estimated by a
  // transform of the recorded requests instead (the hook's status of the step it did not give).
  std::string not_weighed_because;
  bool over_limit = false;
  // What of the run's side channel the replay could not take as recorded (a recorded setting
  // PyTorch would not have run under, two predicted steps at one batch), and what it did instead.
  std::vector<std::string> problems;
  bool fits() const { return ok && !oom && !over_limit; }
};

// Replays one device of a process through the model: the recorded stream, completed by the
// hook's prediction when its first step never ended, scaled, transformed by
// `settings.transform`. `tm` (may be null) gives iterations, modules and the categories
// --scale-batch needs; `background` is the process's memory outside PyTorch over time as
// (time, bytes) steps; `device_total` its capacity.
WhatIfResult replay(const TorchContext& ctx, const TorchMemory* tm, uint32_t device,
                    const std::vector<std::pair<uint64_t, uint64_t>>& background,
                    uint64_t device_total, const WhatIfSettings& settings);

}  // namespace vramtrace::collector

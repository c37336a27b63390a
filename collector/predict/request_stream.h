// A device's allocator requests as the engine replays them: every malloc and free PyTorch's
// caching allocator got (and the request the run itself failed on), in order, each typed with
// what the analysis knows of it (category, module, phase, iteration) and whether it was
// recorded or predicted. Every prediction is this stream transformed, then replayed through
// the allocator's model (collector/predict/replay.h): a batch scale, a step completed from the
// hook's fake-tensor run of it, and the report's remedies (collector/predict/transforms.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

enum class RequestOp : uint8_t {
  Malloc,
  Free,
  RecordedOom,  // the request the run failed on: served and freed at once when it fits
};

// Its fields widest first: a stream holds one per request, and replays copy streams.
struct Request {
  uint64_t time_ns = 0;  // the traced host's CLOCK_MONOTONIC (a predicted one: see completion)
  uint64_t bytes = 0;    // as the program asked (a recorded OOM: as the allocator rounded it)
  uint64_t stream = 0;   // the CUDA stream (the allocator's pools are per stream)
  int64_t iteration = -1;
  uint32_t block = 0;   // pairs a Malloc with its Free (index below RequestStream::blocks)
  uint32_t module = 0;  // TorchContext::modules id, 0: none
  RequestOp op = RequestOp::Malloc;
  Category category = Category::Unclassified;
  TorchPhase phase = TorchPhase::None;
  bool predicted = false;  // from the hook's fake-tensor run of the step, not recorded
  bool scaled = false;     // a batch transform changed its size
};

// A step that never finished, completed from the hook's prediction (TorchPredictedStep).
struct Completion {
  uint64_t predicted_requests = 0;   // Malloc requests the prediction put in
  uint64_t kept_recorded = 0;        // recorded requests of the step kept (workspaces)
  std::vector<std::string> modules;  // the modules of the predicted requests, first seen first
  std::vector<uint64_t> batches;     // the batches the hook predicted a step at, ascending
  uint64_t recorded_batch = 0;       // the batch the run used
  double batch = 0;                  // the batch the completed step is at
  std::string method;  // "predicted at this batch", "interpolated", "scaled from batch N"
};

struct RequestStream {
  uint32_t device = 0;
  std::vector<Request> requests;  // in the order the allocator got them
  uint32_t blocks = 0;            // block indices in use are below this
  bool recorded_oom = false;      // the run had an OOM on this device
  bool window_lost = false;       // PyTorch's trace ring had dropped the run's start
  bool trace_sampled = false;     // the trace was off between sampled iterations (gaps)
  bool categorized = false;       // categories known (the hook's context)
  std::optional<Completion> completion;
  // What of the side channel the stream could not take as written, and what it did instead.
  std::vector<std::string> problems;
};

// The recorded requests of `device` (`tm`, when not null and of `ctx`, gives their
// categories, modules, phases and iterations).
RequestStream recorded_stream(const TorchContext& ctx, const TorchMemory* tm, uint32_t device);

// Activations, temporaries and inputs: what scales with the batch.
bool scales_with_batch(Category c);

// The batch scaled by `scale` (see docs/WHATIF.md): the requests of the categories that scale
// with the batch, and a recorded OOM's request made in a forward or backward, are scaled.
RequestStream scale_batch(RequestStream s, double scale);

// Whether the hook predicted a step for `device` (a status "ok" step with requests).
bool has_predicted_step(const TorchContext& ctx, uint32_t device);

// The recorded stream with its unfinished step completed by prediction, at `scale` times the
// recorded batch: the recorded requests before the step began (scaled by category), then the
// predicted step's in place of the recorded part of it, which keeps only what fake tensors do
// not see (requests that match no predicted one: cuBLAS/cuDNN workspaces). A predicted request
// at another batch is interpolated from the steps the hook gave (docs/WHATIF.md).
RequestStream completed_stream(const RequestStream& recorded, const TorchContext& ctx,
                               uint32_t device, double scale);

// The step the hook ran on fake tensors with `change` ("bf16_autocast", "checkpoint"), at the
// recorded batch; with "" the step it is weighed against: the step as the program runs it (the
// hook's "none" step, or the completion of an unfinished step at the recorded batch). nullptr
// when the hook gave none.
const TorchPredictedStep* predicted_change(const TorchContext& ctx, uint32_t device,
                                           const std::string& change);

// The run's recorded requests before `step` began (its parameters, buffers and batch), then
// `step`'s predicted requests: what fake tensors see of the step. With `reference` (the step as
// the program runs it, which the run's own requests from the step's start are aligned with) and
// `changed` (the step with a change weighed against it; `step` when not given), `step` being one
// of the two, the run's requests that no fake tensor made (cuDNN and cuBLAS workspaces) are put
// in where they came, in `step` by the reference's requests they came after, and again where
// `step` recomputes a forward (checkpointing); none where the run does not align with the
// reference or the reference with the change, so that both weighed steps get them or neither.
// A change's effect is the ratio of the replays of two of these (collector/predict/whatif.cpp).
RequestStream fake_step_stream(const RequestStream& run, const TorchContext& ctx,
                               const TorchPredictedStep& step,
                               const TorchPredictedStep* reference = nullptr,
                               const TorchPredictedStep* changed = nullptr);

// Whether fake_step_stream puts the run's workspaces into `reference` and `changed`: the run
// aligns with the reference and the reference with the change (a change that makes other sizes,
// as autocast does, does not).
bool workspaces_placeable(const RequestStream& run, const TorchPredictedStep& reference,
                          const TorchPredictedStep& changed);

}  // namespace vramtrace::collector

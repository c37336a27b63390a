// What-if: a recorded run replayed under other settings (PYTORCH_CUDA_ALLOC_CONF), another
// limit or a scaled batch, and the report's remedies replayed, each through the one prediction
// engine of collector/predict/: the run's request stream, transformed, run through the model of
// PyTorch's CUDACachingAllocator with the process's memory outside PyTorch's segments as
// background over time. It answers "would this run have fit with expandable_segments / under
// 24 GiB / at 1.5x the batch" without running it again; a run whose first step never ended
// gets that step completed from the start-up hook's prediction first.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "collector/predict/replay.h"
#include "collector/remedy_kinds.h"

namespace vramtrace::collector {

struct ProcessModel;

// For a report's remedies: replays `device` of process `p` (of collector::model_of()) under
// `settings` and says whether it fits. `ok` false (with `error`) when the process has no
// PyTorch allocator trace for that device, or the settings are bad. Same process, same
// settings: the same result; costs one pass over the device's blocks (about 1.2 s per million
// requests); it never writes anything.
WhatIfResult replay_run(const ProcessModel& p, uint32_t device, const WhatIfSettings& settings);

// What --max-batch keeps free under the limits when the step was completed by prediction.
inline constexpr double kCompletedStepMargin = 0.015;
// The largest batch scale max_batch_scale looks at: a step that fits there is said to fit "at
// least" there.
inline constexpr double kMaxBatchScaleTop = 64.0;
// The largest batch scale that fits (bisection by replay, to 1/1000 between `lo` and `hi`):
// nullopt when even `lo` does not fit. Every other setting as in `settings`.
struct MaxBatch {
  double scale = 0;
  WhatIfResult at;  // the replay at that scale
};
std::optional<MaxBatch> max_batch_scale(const ProcessModel& p, uint32_t device,
                                        WhatIfSettings settings, double lo = 0.01,
                                        double hi = kMaxBatchScaleTop);
// The largest batch size that fits, for a step at batch `recorded`, from max_batch_scale's
// answer under the run's own settings: its scale times the batch, floored (what the bisection
// found to fit), then one more sample at a time while that fits too (the bisection stops within
// 0.1 % of the answer, more than a sample for a batch over 1000). Never a batch whose replay runs
// out: the plan, the pre-flight and the report's remedy say this one figure.
uint64_t largest_batch_size(const ProcessModel& p, uint32_t device, const MaxBatch& best,
                            uint64_t recorded, const WhatIfSettings& settings = {});

// A report's remedy as a change of the run (collector/predict/transforms.h): its kind, the
// modules it checkpoints, the blocks it stops keeping (indices into the trace's blocks).
struct RemedyChange {
  RemedyKind kind;
  std::vector<std::string> modules;        // PredictedBy::CheckpointModules
  std::unordered_set<size_t> kept_blocks;  // PredictedBy::WithoutKeptBlocks

  RemedyChange(RemedyKind k, std::vector<std::string> m = {}, std::unordered_set<size_t> kept = {})
      : kind(k), modules(std::move(m)), kept_blocks(std::move(kept)) {}
  // By its name in report.json (remedy_kinds.h); a name not in the table is a caller's mistake:
  // std::invalid_argument.
  RemedyChange(std::string_view name, std::vector<std::string> m = {},
               std::unordered_set<size_t> kept = {})
      : RemedyChange(kind_named(name), std::move(m), std::move(kept)) {}

 private:
  static RemedyKind kind_named(std::string_view name) {
    if (const auto k = remedy_kind_named(name)) return *k;
    throw std::invalid_argument("no remedy kind is named \"" + std::string(name) + "\"");
  }
};

// The remedy's replay: the run's requests (its unfinished step completed when the hook
// predicted it) changed as the remedy would change them, through the allocator's model under
// `settings` (the run's own limit when unset). `ok` false with `error` saying why when the
// remedy cannot be replayed (what it changes is not in the requests, or the run has none).
WhatIfResult replay_remedy(const ProcessModel& p, uint32_t device, const RemedyChange& change,
                           WhatIfSettings settings = {});

// The devices of `p` with PyTorch allocator requests, in order.
std::vector<uint32_t> replayable_devices(const ProcessModel& p);

// One device of one process replayed by `vramtrace whatif` (written by report/whatif_json.h).
struct ProcessReplay {
  uint64_t pid = 0;
  std::string device_name;
  uint64_t device_total = 0;
  WhatIfResult r;
  std::optional<MaxBatch> max_batch;
  // Where the step's batch is known (max_batch's completion, below the top scale): the largest
  // batch size that fits (largest_batch_size).
  std::optional<uint64_t> max_batch_size;
  bool max_batch_asked = false;
  uint64_t origin_ns = 0;  // the run's: a time is said since it
};

// The replay that answers for the run: the first that ran out, else the one with the largest
// reserved peak (the first of those). `replays` is not empty.
inline size_t headline_replay(const std::vector<ProcessReplay>& replays) {
  size_t head = 0;
  for (size_t i = 0; i < replays.size(); ++i) {
    if (!replays[i].r.fits()) return i;
    if (replays[i].r.reserved_peak_bytes > replays[head].r.reserved_peak_bytes) head = i;
  }
  return head;
}

}  // namespace vramtrace::collector

// `vramtrace plan`: the memory of a PyTorch job's first training step, planned before it ran.
// The start-up hook stopped the process before that step's forward (a Z line), having run the
// whole step on fake tensors (N, V and R lines); the plan is the completed step (what the run
// recorded before the step, then the predicted step) replayed under the run's own limit: its
// peak and whether it fits, the largest batch that fits, and each remedy's peak replayed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/predict/whatif.h"

#include "collector/remedy_kinds.h"

namespace vramtrace::collector {

struct Run;

// A remedy of the plan, replayed as the report's are (collector/predict/whatif.h's
// replay_remedy): smaller_batch, mixed_precision, activation_checkpointing, expandable_segments.
struct PlanRemedy {
  RemedyKind kind = RemedyKind::SmallerBatch;
  // What it is in a few words, as the summary, the pre-flight line and the page all say it.
  std::string label;
  bool replayed = false;
  std::string not_replayed_because;  // when not replayed
  // The most the process would hold with it (PyTorch's reserved plus the memory outside it):
  // under the limit when it fits, else what it needs with no limit.
  uint64_t peak_bytes = 0;
  bool fits = false;
};

// One device of a process that stopped for a plan.
struct DevicePlan {
  uint32_t device = 0;
  uint64_t batch = 0;      // the batch the program was about to run
  bool predicted = false;  // a step was predicted (else `error` says why not)
  std::string error;
  // The whole step, completed by prediction: PyTorch's reserved peak, the memory outside
  // PyTorch's segments then, and the two together (the most the process holds); replayed under
  // the limit when it fits there, else with none (what it needs).
  uint64_t reserved_peak_bytes = 0, outside_bytes = 0, peak_bytes = 0;
  uint64_t limit_bytes = 0;  // the device's limit for the process (capacity less the driver's)
  std::string limit_source;
  std::optional<uint64_t> fraction_limit_bytes;  // PyTorch's per-process fraction, when set
  bool fits = false;                             // the replay under the limits served every request
  uint64_t over_bytes = 0;  // it does not fit: by how much its peak passes the tighter limit
  uint64_t free_bytes = 0;  // it fits: how much the tighter limit leaves
  // The largest batch that fits (kCompletedStepMargin kept free), nullopt: not even 1 % of it;
  // `at_least`: the bisection's top (64x) fit too.
  std::optional<uint64_t> largest_batch;
  bool largest_at_least = false;
  std::vector<PlanRemedy> remedies;
  std::vector<uint64_t> predicted_batches;  // the batches the hook ran the step at
};

// A process the hook stopped for a plan.
struct ProcessPlan {
  uint64_t pid = 0;
  uint64_t stopped_ns = 0;  // monotonic
  uint64_t batch = 0;
  uint64_t spent_ns = 0;  // on the fake steps
  bool rng_restored = false;
  std::string loss;  // "program", "model", "cross_entropy", "sum", ""
  // What the prediction could not see: each fake step that failed (its status), the loss
  // assumed, the gradients assumed set to none.
  std::vector<std::string> unseen;
  // What the hook said of how the steps ran (ZN lines: the program's own loop's steps and the
  // stand-in's, values read from fake tensors, what was put back).
  std::vector<std::string> notes;
  std::vector<DevicePlan> devices;
};

// The plans of the run's processes that stopped for one, in process order.
std::vector<ProcessPlan> plans_of(const Run& run);

// One device's plan of process `p` (with the hook's predicted steps and plan stop).
DevicePlan device_plan(const ProcessModel& p, uint32_t device);

}  // namespace vramtrace::collector

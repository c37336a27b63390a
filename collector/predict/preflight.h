// `vramtrace run --preflight`: a PyTorch job's first training step predicted before it runs, and
// the prediction held against the step once it ran. At the first training call the start-up hook
// runs the whole step on fake tensors (as `vramtrace plan` does, collector/predict/plan.h), writes
// its side channel with a PF line and asks the launcher for the verdict of the moment (the plan's
// figures: cli/preflight.h); the program then goes on. The run's report holds, for each process
// and device, the predicted reserved peak of the step (the completed step replayed as the
// pre-flight replayed it) beside PyTorch's reserved peak recorded over the same two iterations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/predict/plan.h"

namespace vramtrace::collector {

struct ProcessModel;
struct Run;

// One device of a process that had a pre-flight.
struct PreflightDevice {
  uint32_t device = 0;
  uint64_t batch = 0;
  bool predicted = false;  // else `error` says why not
  std::string error;
  // The predicted step as the plan figures it (DevicePlan): PyTorch's reserved peak, and with the
  // memory outside PyTorch; replayed under the limit when it fits there, else with none.
  uint64_t predicted_reserved_peak_bytes = 0, predicted_peak_bytes = 0;
  bool predicted_fits = false;
  uint64_t limit_bytes = 0;
  // The same step recorded: PyTorch's reserved peak from the step's start to the end of the
  // second optimizer step (the fake step runs two iterations). `compared` false: the run did
  // not record both whole (`not_compared_because`).
  bool compared = false;
  std::string not_compared_because;
  uint64_t recorded_reserved_peak_bytes = 0;
  uint64_t from_ns = 0, to_ns = 0;  // the recorded span, monotonic
  double error_percent = 0;         // (predicted - recorded) / recorded x 100
};

struct ProcessPreflight {
  uint64_t pid = 0;
  uint64_t time_ns = 0;  // when the hook asked for the verdict, monotonic
  uint64_t batch = 0;
  uint64_t spent_ns = 0;  // on the fake steps
  bool rng_restored = false;
  std::string loss;
  std::vector<std::string> assumed;  // what the stand-in step assumed of the program's loop
  std::vector<PreflightDevice> devices;
};

// The devices the hook predicted a step for (any status), in order.
std::vector<uint32_t> preflight_devices(const ProcessModel& p);

// The pre-flights of the run's processes (a PF line), in process order.
std::vector<ProcessPreflight> preflights_of(const Run& run);

// One device's pre-flight of process `p`: the prediction replayed (as the pre-flight did, the
// recorded requests from the step on left out) and the recorded step beside it.
PreflightDevice preflight_device(const ProcessModel& p, uint32_t device);

// The verdict at the pre-flight's moment, in words (one line per device, each starting with
// "vramtrace: PRE-FLIGHT: "): the plan of the moment's model (`p`: the traces up to the request).
// `more`, at the first stage (the hook predicted the step at its batch alone): set when a device
// will run out, whose line then says so and that the largest batch and the remedies follow (the
// hook predicts them and asks again).
std::string preflight_verdict(const ProcessModel& p, bool* more = nullptr);

}  // namespace vramtrace::collector

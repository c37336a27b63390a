// report.json's sections on what PyTorch's memory is (categories, modules, named tensors,
// phases), on each OOM's moment, and the run's diagnosis with its remedies (torch_json.cpp):
// written from collector/analysis/torch_device.h's and collector/analysis/run_diagnosis.h's typed
// values.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "collector/analysis/run_diagnosis.h"
#include "collector/analysis/torch_device.h"
#include "collector/model/model.h"
#include "collector/predict/plan.h"
#include "collector/predict/preflight.h"

namespace vramtrace::report {

// Adds "xla_pool", and when PyTorch's blocks were classified "categories", "phases",
// "peak.by_module", "peak.by_top_module", "peak.tensors", "peak.named_tensors", "peak.by_line"
// and "peak.blocks", to a device (of process `p`, or the run's device it alone used).
void add_torch_device(nlohmann::json& dj, const collector::ProcessModel& p,
                      const collector::TorchDevice& t, uint64_t origin);

// Adds "fatal", and with the hook's context "phase", "iteration", "module", "python_site",
// "exception" and "categories", to an OOM.
void add_torch_oom(nlohmann::json& oj, const collector::OomEvent& o,
                   const std::optional<collector::TorchOom>& t);

// The run's verdict, effective limit, cause and remedies.
nlohmann::json diagnosis_json(const collector::Diagnosis& dg);

// `vramtrace plan`'s "plan": each process the hook stopped before its first training step, and
// each device's completed step replayed (collector/predict/plan.h). Times since `origin`.
nlohmann::json plan_json(const std::vector<collector::ProcessPlan>& plans, uint64_t origin);

// `vramtrace run --preflight`'s "preflight": each process's first training step predicted before
// it ran (collector/predict/preflight.h), and per device the prediction beside the same step
// recorded. Times since `origin`.
nlohmann::json preflight_json(const std::vector<collector::ProcessPreflight>& preflights,
                              uint64_t origin);

}  // namespace vramtrace::report

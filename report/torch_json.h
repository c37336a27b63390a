// report.json's sections on what PyTorch's memory is (categories, modules, named tensors,
// phases), on each OOM's moment, and the run's diagnosis with its remedies (torch_json.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include "collector/model.h"
#include "collector/stacks.h"

namespace vramtrace::report {

// Adds "categories", "phases", "peak.by_module", "peak.by_top_module" and "peak.tensors" to a
// process's device when the start-up hook recorded the program's context.
void add_torch_device(nlohmann::json& dj, const collector::ProcessModel& p,
                      const collector::DeviceModel& d, collector::StackResolver& stacks,
                      uint64_t origin);

// Adds "fatal", and with the hook's context "phase", "iteration", "module", "python_site",
// "exception" and "categories", to an OOM.
void add_torch_oom(nlohmann::json& oj, const collector::ProcessModel& p,
                   const collector::OomEvent& o, collector::StackResolver& stacks);

// A device's run-wide entry takes its one PyTorch or JAX process's categories, phases, modules,
// named tensors and XLA pool (with several processes these stay per process).
void lift_single_process(nlohmann::json& report);

// The run's verdict, effective limit, cause and remedies: the fatal OOM and its first finding
// from the report built so far, the categories and remedies from the collector.
nlohmann::json diagnosis_json(const nlohmann::json& report, const collector::Run& run,
                              collector::Symbolizer& symbols);

}  // namespace vramtrace::report

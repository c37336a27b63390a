// `vramtrace export --perfetto`: a run as Chrome's trace event JSON, the format ui.perfetto.dev
// and chrome://tracing open. One process group per traced process: its device memory as counter
// tracks (in use per device, and PyTorch's categories over time where the run has them), each
// OOM an instant with its request, iterations, PyTorch's phases and NVTX ranges as slices.
// Times are on the report's clock: microseconds from the run's first CUDA work.
#pragma once

#include <nlohmann/json.hpp>

#include "collector/analysis/analysis.h"

namespace vramtrace::report {

nlohmann::json perfetto_trace(const collector::RunAnalysis& a);

}  // namespace vramtrace::report

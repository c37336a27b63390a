// The inputs of `check`, `diff` and `run --baseline`: a report.json, a run directory (its
// report.json, or its traces) or a trace file, read into a report the comparison
// (collector/analysis/compare.h) can trust. A run given as traces is reported here as `vramtrace
// report` would report it (the collector's pipeline, which report/ does not run).
#pragma once

#include <string>

#include "collector/contract/report_read.h"

namespace vramtrace::cli {

// `path` read into a report of schema vramtrace.report/1; `role` ("baseline", "candidate", "A")
// begins every message. Throws collector::CheckError saying what is wrong with it.
collector::ReportRead load_report(const std::string& path, const std::string& role);

}  // namespace vramtrace::cli

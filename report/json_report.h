// The JSON report (schema "vramtrace.report/1"), written from the run's analysis
// (collector/analysis/analysis.h), and the short summary printed after a run (summary.cpp).
//
// Contract keys (DESIGN.md, "Outputs") keep their meaning within a schema version: devices[]
// with index, name, total_bytes, peak.bytes, peak.time_ns, final_live_bytes; oom[] with device,
// requested_bytes, time_ns; leaks[] with bytes, count, site. Everything else is additional.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "collector/analysis/analysis.h"
#include "collector/analysis/moment.h"
#include "collector/model/model.h"
#include "common/bytes_text.h"
#include "common/printable.h"

namespace vramtrace::report {

inline constexpr const char* kSchema = "vramtrace.report/1";

struct RunInfo {
  std::vector<std::string> command;  // what `vramtrace run` started, if it did
  std::optional<int> exit_code;
  std::optional<int> signal;
  // Traces (their paths) of processes still connected when the launcher stopped waiting for
  // them: they outlived the command, so what they held then is not a leak.
  std::vector<std::string> still_running;
};

// The analysis as report.json. `a` was made with info.still_running (analysis_of).
nlohmann::json to_json(const collector::RunAnalysis& a, const RunInfo& info = {});

// The run analysed (with info.still_running) and written, in one call: for tests and tools
// that have only the model.
nlohmann::json to_json(const collector::Run& run, const RunInfo& info = {});

// A live set's groups as report.json writes them ({"by_site": [$defs/site_group], "by_library":
// [$defs/library_group]}): what is live now in a report of a moment (cli/live_report.h).
nlohmann::json live_groups_json(const collector::LiveSet& live);
// A report of a moment's "live" object: {"running": true, "now": [...], "cuda_used", "note"},
// from the moment's analysis (collector/analysis/moment.h).
nlohmann::json live_json(const collector::MomentAnalysis& m);

// A few lines for stderr: peak per device, OOMs, leak suspects, problems; from report.json alone.
std::string summary_text(const nlohmann::json& report);

// A string from the traced program made safe for a terminal or a CI log (common/printable.h).
using vramtrace::printable;
using vramtrace::printable_lines;

// The readable form of a mangled kernel name (the mangled name itself if it is not one).
std::string demangle(const std::string& name);

}  // namespace vramtrace::report

// The JSON report (schema "vramtrace.report/1") and the short summary printed after a run.
//
// Contract keys (DESIGN.md, "Outputs") keep their meaning within a schema version: devices[]
// with index, name, total_bytes, peak.bytes, peak.time_ns, final_live_bytes; oom[] with device,
// requested_bytes, time_ns; leaks[] with bytes, count, site. Everything else is additional.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "collector/model.h"

namespace vramtrace::report {

inline constexpr const char* kSchema = "vramtrace.report/1";

struct RunInfo {
  std::vector<std::string> command;  // what `vramtrace run` started, if it did
  std::optional<int> exit_code;
  std::optional<int> signal;
};

nlohmann::json to_json(const collector::Run& run, const RunInfo& info = {});

// A few lines for stderr: peak per device, OOMs, leak suspects, problems.
std::string summary_text(const nlohmann::json& report);

// "1.50 GiB", "512 B"
std::string human_bytes(uint64_t bytes);

// The readable form of a mangled kernel name (the mangled name itself if it is not one).
std::string demangle(const std::string& name);

}  // namespace vramtrace::report

// report.json read back, typed: what `check`, `diff` and `run --baseline` know of a run, read
// once from its report (a stored report.json from any earlier run, or one made again from
// traces) into one value, so that the comparison (collector/analysis/compare.h) reads figures,
// never keys. malformed_report() says what a stored report lacks before it is trusted; the
// reading itself never throws: a key of the wrong type is read as absent.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace vramtrace::collector {

// A group of blocks live at a peak: a site's or a library's (peak.by_site, by_library), a
// module's (peak.by_module).
struct PeakGroup {
  std::string name;
  uint64_t bytes = 0, count = 0;
};

// A user's Python line at a peak (peak.by_line): its blocks, their categories and its module.
struct PeakLine {
  std::string site;
  uint64_t bytes = 0, count = 0;
  std::map<std::string, uint64_t> categories;
  std::string module;
};

// PyTorch's memory at a device entry's peak, where the entry has categories.at_peak.
struct PeakTorch {
  std::vector<std::string> order;             // categories.order
  std::map<std::string, std::string> titles;  // categories.titles
  std::map<std::string, uint64_t> at_peak;    // categories.at_peak, whole numbers of bytes only
  std::vector<PeakGroup> by_module;           // peak.by_module
  std::vector<PeakLine> by_line;              // peak.by_line
};

// A device of devices[], or of a process's devices[].
struct DeviceEntry {
  std::optional<uint32_t> index;
  std::optional<std::string> name;
  uint64_t peak_bytes = 0;
  std::optional<std::vector<PeakGroup>> by_site, by_library;  // absent: not in this entry
  bool has_categories = false;     // a categories object, with or without at_peak
  std::optional<PeakTorch> torch;  // categories.at_peak there
};

struct ProcessEntry {
  std::optional<uint64_t> pid;
  std::string exe;
  std::optional<bool> profiled;
  std::string not_profiled_reason;
  std::vector<std::string> notices;
  std::map<std::string, std::string> ranks;  // the launcher's rank variables, as given
  std::vector<DeviceEntry> devices;
  std::optional<int64_t> exit_status;
  std::optional<bool> cut_short, clean_exit;
};

struct OomEntry {
  bool fatal = false, recovered = false;
  std::optional<uint64_t> device, requested_bytes;
  std::string python_site, site, phase;
  std::optional<int64_t> iteration;
};

struct GrowthEntry {
  uint64_t device = 0, bytes_per_iteration = 0;
  std::string site;
};

// The rank that used the most memory (worst_rank).
struct WorstRank {
  std::string rank;  // as JSON writes it (any bytes of a process's environment)
  uint64_t peak_bytes = 0;
  uint32_t device = 0;
};

// What the run was: the command's exit, whether it finished, its damaged traces.
struct RunEntry {
  std::optional<int64_t> exit_code, signal;
  std::vector<std::string> problems;
  std::optional<bool> complete;
  std::string command;  // its words joined by spaces; "" when not recorded
};

struct ReportRead {
  ReportRead() = default;
  // Reads `report` (any JSON: what is not there, or not of its type, is absent). Implicit, so
  // that a report.json in hand is a report read.
  ReportRead(const nlohmann::json& report);  // NOLINT(google-explicit-constructor)

  bool is_object = false;
  std::vector<DeviceEntry> devices;
  std::vector<ProcessEntry> processes;
  std::vector<uint64_t> leak_bytes;  // each leak suspect's bytes
  std::vector<OomEntry> oom;
  std::vector<GrowthEntry> growth;
  std::optional<WorstRank> worst_rank;
  std::optional<RunEntry> run;
  // The report itself, for the views that show each run whole (diff's page).
  nlohmann::json document;
};

// What is wrong with a stored report before it is trusted: "" when nothing is. The figures the
// comparison reads are there and of their type, and sizes and counts of sites stay below 2^53
// (the integers JSON keeps exact), so that their sums and differences cannot overflow.
std::string malformed_report(const nlohmann::json& report);

}  // namespace vramtrace::collector

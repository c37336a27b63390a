// report.json's keys as its writer and its readers name them: the report read back for the
// comparison of two runs (report_read.h) and the summary read a report through these names
// (report[field::devices][i][field::peak][field::bytes]) and the typed accessors below, and the
// writer (report/json_report.cpp, report/torch_json.cpp) writes those keys through
// them, so that a key is spelled in one place. The contract itself, every key with its
// type, is report/report.schema.json; tests/contract/schema_test.py fails on a name here that
// the schema does not declare.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace vramtrace::collector {

namespace field {

using Key = const char*;

inline constexpr Key at_peak = "at_peak";
inline constexpr Key by_library = "by_library";
inline constexpr Key by_line = "by_line";
inline constexpr Key by_module = "by_module";
inline constexpr Key by_site = "by_site";
inline constexpr Key bytes = "bytes";
inline constexpr Key bytes_per_iteration = "bytes_per_iteration";
inline constexpr Key categories = "categories";
inline constexpr Key clean_exit = "clean_exit";
inline constexpr Key command = "command";
inline constexpr Key complete = "complete";
inline constexpr Key count = "count";
inline constexpr Key cuda_start_ns = "cuda_start_ns";
inline constexpr Key cut_short = "cut_short";
inline constexpr Key device = "device";
inline constexpr Key devices = "devices";
inline constexpr Key diagnosis = "diagnosis";
inline constexpr Key dropped_events = "dropped_events";
inline constexpr Key exe = "exe";
inline constexpr Key exit_code = "exit_code";
inline constexpr Key exit_status = "exit_status";
inline constexpr Key fatal = "fatal";
inline constexpr Key final_live_bytes = "final_live_bytes";
inline constexpr Key findings = "findings";
inline constexpr Key growth = "growth";
inline constexpr Key how = "how";
inline constexpr Key index = "index";
inline constexpr Key iteration = "iteration";
inline constexpr Key iterations = "iterations";
inline constexpr Key kept = "kept";
inline constexpr Key kind = "kind";
inline constexpr Key launches = "launches";
inline constexpr Key leaks = "leaks";
inline constexpr Key library = "library";
inline constexpr Key limit = "limit";
inline constexpr Key live_at_death = "live_at_death";
inline constexpr Key live_bytes = "live_bytes";
inline constexpr Key max_over_mean = "max_over_mean";
inline constexpr Key module = "module";
inline constexpr Key name = "name";
inline constexpr Key not_profiled_reason = "not_profiled_reason";
inline constexpr Key note = "note";
inline constexpr Key notices = "notices";
inline constexpr Key oom = "oom";
inline constexpr Key oom_index = "oom_index";
inline constexpr Key order = "order";
inline constexpr Key peak = "peak";
inline constexpr Key peak_bytes = "peak_bytes";
inline constexpr Key phase = "phase";
inline constexpr Key pid = "pid";
inline constexpr Key problems = "problems";
inline constexpr Key processes = "processes";
inline constexpr Key profiled = "profiled";
inline constexpr Key python_site = "python_site";
inline constexpr Key rank = "rank";
inline constexpr Key rank_imbalance = "rank_imbalance";
inline constexpr Key ranks = "ranks";
inline constexpr Key recorded = "recorded";
inline constexpr Key recovered = "recovered";
inline constexpr Key remedies = "remedies";
inline constexpr Key requested_bytes = "requested_bytes";
inline constexpr Key run = "run";
inline constexpr Key saves_bytes = "saves_bytes";
inline constexpr Key predicted_at_exit = "predicted_at_exit";
inline constexpr Key predicted_peak_bytes = "predicted_peak_bytes";
inline constexpr Key predicted_peak_high_bytes = "predicted_peak_high_bytes";
inline constexpr Key predicted_peak_is_lower_bound = "predicted_peak_is_lower_bound";
inline constexpr Key predicted_peak_is_upper_bound = "predicted_peak_is_upper_bound";
inline constexpr Key leaves_growth = "leaves_growth";
inline constexpr Key replayed = "replayed";
inline constexpr Key not_replayed_because = "not_replayed_because";
inline constexpr Key completed_by_prediction = "completed_by_prediction";
inline constexpr Key reserved_peak_bytes = "reserved_peak_bytes";
inline constexpr Key cause = "cause";
inline constexpr Key verdict = "verdict";
inline constexpr Key schema = "schema";
inline constexpr Key signal = "signal";
inline constexpr Key site = "site";
inline constexpr Key stand_in = "stand_in";
inline constexpr Key still_running = "still_running";
inline constexpr Key time_ns = "time_ns";
inline constexpr Key timeline_end_ns = "timeline_end_ns";
inline constexpr Key title = "title";
inline constexpr Key titles = "titles";
inline constexpr Key total_bytes = "total_bytes";
inline constexpr Key up_to_recorded_oom = "up_to_recorded_oom";
inline constexpr Key worst_rank = "worst_rank";

}  // namespace field

// The contract keys (DESIGN.md, "Outputs"), typed: a device of devices[] (or of a process's
// devices[]), an entry of oom[].
inline uint32_t device_index(const nlohmann::json& device) {
  return device[field::index].get<uint32_t>();
}
inline std::string device_name(const nlohmann::json& device) {
  return device[field::name].get<std::string>();
}
inline uint64_t peak_bytes(const nlohmann::json& device) {
  return device[field::peak][field::bytes].get<uint64_t>();
}
inline uint64_t peak_time_ns(const nlohmann::json& device) {
  return device[field::peak][field::time_ns].get<uint64_t>();
}
// The origin of the times a report's words give (its chart's too): the run's first CUDA work,
// since the run's start (0 in a report without it, whose times count from the start).
inline uint64_t cuda_start_ns(const nlohmann::json& report) {
  const auto run = report.find("run");
  if (run == report.end() || !run->is_object()) return 0;
  const auto t = run->find(field::cuda_start_ns);
  return t != run->end() && t->is_number_unsigned() ? t->get<uint64_t>() : 0;
}
inline uint64_t total_bytes(const nlohmann::json& device) {
  return device[field::total_bytes].get<uint64_t>();
}
inline uint64_t final_live_bytes(const nlohmann::json& device) {
  return device[field::final_live_bytes].get<uint64_t>();
}
inline uint64_t requested_bytes(const nlohmann::json& oom) {
  return oom[field::requested_bytes].get<uint64_t>();
}

}  // namespace vramtrace::collector

// The CI gate and the run diff: compare a candidate run's peaks with a baseline's.
//
// `vramtrace check` passes (exit 0) when every device's peak, and every rank's when the run has
// ranks, is within its budget; fails (exit 1) on a regression, naming what grew at the peak;
// and answers bad input (missing, corrupt, wrong schema) with exit 2 and a message.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vramtrace::report {

// Bad input or usage: the message says which; the command exits 2.
struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "5%" or "256MiB" (also KiB, GiB, KB, MB, GB, B). parse_size also takes a plain number of bytes;
// parse_increase refuses one ("5" is a share or a size, never 5 bytes), naming both spellings.
struct Budget {
  std::optional<double> percent;
  std::optional<uint64_t> bytes;
  std::string text() const;
};
Budget parse_increase(const std::string& s);  // throws CheckError
uint64_t parse_size(const std::string& s);    // throws CheckError

struct Budgets {
  Budget max_increase{5.0, std::nullopt};  // default: 5%
  std::map<uint32_t, Budget> max_increase_by_device;
  std::optional<uint64_t> max_peak;
  std::map<uint32_t, uint64_t> max_peak_by_device;
  std::optional<uint32_t> only_device;
};
// Parses "5%", "256MiB", "1:10%" (device 1 only) into `b`. Throws CheckError.
void add_increase_option(Budgets& b, const std::string& value);
void add_peak_option(Budgets& b, const std::string& value);

struct SiteChange {
  std::string site;
  int64_t baseline_bytes = 0, candidate_bytes = 0;
  int64_t baseline_count = 0, candidate_count = 0;
  int64_t diff() const { return candidate_bytes - baseline_bytes; }
};

struct Comparison {
  std::string scope;  // "device 0 (NVIDIA H200)", "rank 1, device 1 (...)"
  uint32_t device = 0;
  std::optional<uint64_t> baseline_peak, candidate_peak;
  std::string budget_text;
  uint64_t allowed_peak = 0;  // the largest candidate peak within budget
  bool regression = false;
  std::string note;                         // "new device", "device no longer used", ...
  std::vector<SiteChange> changes;          // by site, largest absolute change first
  std::vector<SiteChange> library_changes;  // by owning library, likewise
};

struct CheckResult {
  std::vector<Comparison> rows;
  // The candidate's processes that vramtrace could not profile (unprofiled_processes()): their
  // device memory is unknown, so the candidate's peaks are lower bounds and it cannot pass.
  std::vector<std::string> not_profiled;
  // Why the candidate is not a whole measurement of the baseline's command (incomplete_reasons()):
  // it cannot pass either.
  std::vector<std::string> incomplete;
  bool regression() const;
  bool unprofiled() const { return !not_profiled.empty(); }
  bool is_incomplete() const { return !incomplete.empty(); }
};

// The exit code of the gate: 1 on a regression (certain even with processes not profiled or cut
// short: a measured peak is a lower bound of the real one), else 3 when the candidate has a
// process that was not profiled (its memory is unknown), else 4 when the candidate is an
// incomplete measurement (incomplete_reasons()), else 0.
inline constexpr int kExitRegression = 1;
inline constexpr int kExitNotProfiled = 3;
inline constexpr int kExitIncomplete = 4;
int gate_exit_code(const CheckResult& r);

// Why a candidate cannot stand for the baseline's command, each a sentence: it has no profiled
// process (the command did not exist, used no CUDA, or its traces were unreadable); the baseline
// has a device (among those checked) that the candidate has no measurement for; its command
// differs from the baseline's (both recorded by `vramtrace run`); or it was cut short: the
// command was killed by a signal or exited non-zero, a process did not exit cleanly, or a trace
// was damaged. Reads only keys it checks the type of: any JSON object is safe here.
// A device the candidate lacks is not a reason of its own when the candidate has a process that
// was not profiled (`unprofiled`): that process may have used it, and says so already.
std::vector<std::string> incomplete_reasons(const nlohmann::json& baseline,
                                            const nlohmann::json& candidate,
                                            const std::optional<uint32_t>& only_device,
                                            bool unprofiled = false);

// The processes of a report that vramtrace could not profile (processes[].profiled false; in a
// report from before that key, a process with notices: only the library's giving up wrote one),
// each as "pid P (EXE): REASON".
std::vector<std::string> unprofiled_processes(const nlohmann::json& report);

// Throws CheckError when a baseline has a process that was not profiled: its peaks are lower
// bounds of what the baseline run used, and a comparison with them would find regressions that
// are only memory the baseline did not see.
void require_profiled_baseline(const nlohmann::json& baseline, const std::string& path);

// A report.json, a run directory (its report.json, or its traces), or a trace file, read into a
// report of schema vramtrace.report/1. Throws CheckError saying what is wrong with it.
nlohmann::json load_report(const std::string& path, const std::string& role);

CheckResult compare(const nlohmann::json& baseline, const nlohmann::json& candidate,
                    const Budgets& budgets);

std::string check_text(const CheckResult& r);
std::string check_markdown(const CheckResult& r);
std::string check_junit(const CheckResult& r);
// The CI files when there is nothing to compare (bad input, a command that failed before the
// gate): they say why, and fail.
std::string failure_markdown(const std::string& why);
std::string failure_junit(const std::string& why);
std::string diff_text(const nlohmann::json& a, const nlohmann::json& b, const CheckResult& r);
std::string diff_html(const nlohmann::json& a, const nlohmann::json& b, const CheckResult& r);

// Escaping for the outputs that carry strings from the traced program.
std::string escape_xml(const std::string& s);
std::string escape_markdown(const std::string& s);

}  // namespace vramtrace::report

// The comparison of a candidate run with a baseline, for the CI gate (`vramtrace check`, `run
// --baseline`) and the run diff (`vramtrace diff`): what changed at each device's peak, and each
// rank's, by how much, against which budget, and whether that is a regression; the processes
// not profiled and why a candidate is an incomplete measurement; what changed inside the peak
// (PyTorch's categories and their budgets, modules, Python lines), in growth and in OOMs. One
// typed result, decided here and only rendered by report/check.cpp.
//
// It reads two reports as collector/contract/report_read.h reads them back (a baseline is a
// stored report.json, from any earlier run, that malformed_report() has found nothing wrong
// with): figures, never keys.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collector/contract/report_read.h"

namespace vramtrace::collector {

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
  // PyTorch's categories at the peak ("parameters:0", "activations:5%"), on every device.
  std::map<std::string, Budget> by_category;
  std::map<uint32_t, Budget> max_increase_by_device;
  std::optional<uint64_t> max_peak;
  std::map<uint32_t, uint64_t> max_peak_by_device;
  std::optional<uint32_t> only_device;
  // The budgets given, by option and scope ("--max-increase activations"): a second one for the
  // same scope is refused, never a silent replacement that loosens the gate.
  std::map<std::string, std::string> given;
};
// Records OPTION's budget for SCOPE (VALUE as given); throws CheckError when one was given.
void given_once(Budgets& b, const std::string& option, const std::string& scope,
                const std::string& value);
// Parses "5%", "256MiB", "1:10%" (device 1 only) into `b`. Throws CheckError.
void add_increase_option(Budgets& b, const std::string& value);
void add_peak_option(Budgets& b, const std::string& value);
// "CATEGORY:BUDGET" (parameters:0, activations:5%) into b.by_category; false when the part
// before ':' is not one of PyTorch's categories (a device's budget, or a mistake that
// add_increase_option() refuses). Throws CheckError on a bad budget.
bool add_category_option(Budgets& b, const std::string& value);
// The categories a budget may name: report.json's keys of categories.at_peak.
std::vector<std::string> category_keys();
// The largest figure within `b` of `base` (saturating).
uint64_t allowed_by(const Budget& b, uint64_t base);

struct SiteChange {
  std::string site;
  std::string what;  // a Python line's categories and module: "activations; module lm_head"
  int64_t baseline_bytes = 0, candidate_bytes = 0;
  int64_t baseline_count = 0, candidate_count = 0;
  int64_t diff() const { return candidate_bytes - baseline_bytes; }
};

// A category of PyTorch's memory at the peak (categories.at_peak of each report).
struct CategoryChange {
  std::string key, title;  // "optimizer_state", "optimizer state"
  uint64_t baseline_bytes = 0, candidate_bytes = 0;
  std::optional<Budget> budget;  // Budgets::by_category
  uint64_t allowed = 0;          // with a budget: the most the candidate may hold
  bool regression = false;
  int64_t diff() const {
    return static_cast<int64_t>(candidate_bytes) - static_cast<int64_t>(baseline_bytes);
  }
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
  // PyTorch runs (either side has categories): what the blocks at the peak are, and which
  // modules and Python lines hold them; `changes` then leaves out the allocator's segments.
  bool torch = false;
  std::vector<CategoryChange> categories;  // in the report's order, every category of either
  std::vector<SiteChange> module_changes;  // peak.by_module, largest absolute change first
  std::vector<SiteChange> line_changes;    // peak.by_line, likewise
  bool category_regression() const;
};

// One side of a comparison as a whole, for the run diff's first and last lines.
struct RunTotals {
  size_t devices = 0, processes = 0;
  uint64_t leak_bytes = 0;  // the leak suspects' bytes
  size_t ooms = 0;
  std::vector<std::string> not_profiled;  // unprofiled_processes()
};

struct CheckResult {
  std::vector<Comparison> rows;
  // The candidate's processes that vramtrace could not profile (unprofiled_processes()): their
  // device memory is unknown, so the candidate's peaks are lower bounds and it cannot pass.
  std::vector<std::string> not_profiled;
  // Why the candidate is not a whole measurement of the baseline's command (incomplete_reasons()):
  // it cannot pass either.
  std::vector<std::string> incomplete;
  // Said, never failed on: another command than the baseline's (`--batch 12`).
  std::vector<std::string> notes;
  // Growth per iteration (growth[]) and out-of-memory events (oom[]) that appeared, went or
  // changed, each a sentence.
  std::vector<std::string> growth_changes, oom_changes;
  RunTotals baseline, candidate;
  bool regression() const;
  bool unprofiled() const { return !not_profiled.empty(); }
  bool is_incomplete() const { return !incomplete.empty(); }
  // The rows over budget (their peak, or a category's), and whether the candidate passes.
  size_t failed_rows() const;
  bool passed() const { return !failed_rows() && !unprofiled() && !is_incomplete(); }
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
// was damaged.
// A device the candidate lacks is not a reason of its own when the candidate has a process that
// was not profiled (`unprofiled`): that process may have used it, and says so already.
std::vector<std::string> incomplete_reasons(const ReportRead& baseline, const ReportRead& candidate,
                                            const std::optional<uint32_t>& only_device,
                                            bool unprofiled = false);

// The processes of a report that vramtrace could not profile (processes[].profiled false; in a
// report from before that key, a process with notices: only the library's giving up wrote one),
// each as "pid P (EXE): REASON".
std::vector<std::string> unprofiled_processes(const ReportRead& report);

// Throws CheckError when a baseline has a process that was not profiled: its peaks are lower
// bounds of what the baseline run used, and a comparison with them would find regressions that
// are only memory the baseline did not see.
void require_profiled_baseline(const ReportRead& baseline, const std::string& path);

// Throws CheckError when a budget or --device names a device neither report has.
CheckResult compare(const ReportRead& baseline, const ReportRead& candidate,
                    const Budgets& budgets);

// The parts of compare() (compare_torch.cpp): a row's PyTorch side (categories, modules and
// lines), and the run's growth, OOM changes and notes.
void compare_torch(const ReportRead& baseline, const DeviceEntry* bd, const ReportRead& candidate,
                   const DeviceEntry* cd, const Budgets& b, Comparison& row);
void compare_run_details(const ReportRead& baseline, const ReportRead& candidate, CheckResult& r);
// The command line's note (different command), "" when the same or unknown.
std::string command_note(const ReportRead& baseline, const ReportRead& candidate);

}  // namespace vramtrace::collector

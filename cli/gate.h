// The CI gate shared by `check` and `run --baseline`: the budget options, the verdict and the
// CI files (--markdown, --junit), which are written whatever happens, failing when the gate
// could not compare.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/check.h"

namespace vramtrace::cli {

struct CheckOptions {
  std::string baseline;
  std::vector<std::string> max_increase, max_peak;
  std::optional<uint32_t> device;
  std::string markdown, junit;
  bool force = false;  // replace an existing --markdown or --junit file
};

// A whole number in decimal digits only, from lo to hi, with CLI::Range's message.
CLI::Validator decimal_range(long long lo, long long hi);

// The value of -o: a folder's name, not empty and not an option ("run -o -- CMD" would make a
// folder named "--").
CLI::Validator folder_name();

// --max-increase, --max-peak, --device, --markdown, --junit on `app`, into `o`.
void add_budget_options(CLI::App* app, CheckOptions& o);

// Parses the budgets; throws collector::CheckError.
collector::Budgets budgets_of(const CheckOptions& o);

// Whether the CI files may be written (cli/commands.h output_file_allowed): neither is one of
// `inputs` (the baseline, the candidate), they are two different files, and an existing one is
// replaced only with --force. Otherwise says why in one line (nothing when `who` is null) and
// returns false: nothing may be written then, not even a failing CI file.
bool ci_files_allowed(const CheckOptions& o, const std::vector<std::string>& inputs,
                      const char* who);

// When the gate cannot compare (bad input, a command that failed): the CI files named by
// --markdown and --junit still appear, failing and saying why, so that a CI page never shows a
// stale or missing result as a pass.
void write_gate_failure(const CheckOptions& o, const std::string& why);

// When the command line itself is refused (CLI11: a bad value, an unknown option), the CI
// files that the first `argc` words name (--markdown FILE, --junit=FILE) are written failing
// all the same, with `why`.
void write_gate_failure_of_args(int argc, char** argv, const std::string& why);

// Prints the verdict and writes the CI files. Returns 0 within budget, 1 on regression, 3 when
// the candidate has a process that was not profiled, 4 when it is an incomplete measurement
// (collector::gate_exit_code), 2 when it cannot compare, 74 when a CI file cannot be written.
int gate(const collector::ReportRead& baseline, const collector::ReportRead& candidate,
         const CheckOptions& o, const char* who);

}  // namespace vramtrace::cli

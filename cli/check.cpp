// `vramtrace check CANDIDATE --baseline BASE`: the CI gate on two reports (or traces, or run
// folders): exit 1 on a regression, 3 or 4 when the candidate is not a whole measurement.
#include <iostream>
#include <memory>

#include "cli/check_load.h"
#include "cli/commands.h"
#include "cli/gate.h"

namespace vramtrace::cli {
namespace {

int check_command(const std::string& candidate, const CheckOptions& o) {
  if (!ci_files_allowed(o, {o.baseline, candidate}, "vramtrace check")) return 2;
  for (const std::string& path : {o.baseline, candidate})
    if (!input_is_one_run(path, "vramtrace check")) {
      write_gate_failure(o, path + ": traces of different runs");
      return 2;
    }
  try {
    budgets_of(o);
    collector::ReportRead base = load_report(o.baseline, "baseline");
    collector::require_profiled_baseline(base, o.baseline);
    collector::ReportRead cand = load_report(candidate, "candidate");
    return gate(base, cand, o, "vramtrace check");
  } catch (const collector::CheckError& e) {
    std::cerr << "vramtrace check: " << report::printable(e.what()) << "\n";
    write_gate_failure(o, e.what());
    return 2;
  }
}

struct CheckArgs {
  CheckOptions options;
  std::string candidate;
};

}  // namespace

Command add_check_command(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  auto* chk = app.add_subcommand("check", "CI gate: exit 1 when the peak grew past its budget");
  chk->add_option("candidate", args->candidate, "report.json, trace or run directory")->required();
  chk->add_option("--baseline", args->options.baseline, "report.json, trace or run directory")
      ->required();
  add_budget_options(chk, args->options);
  chk->add_flag("--force", args->options.force,
                "Replace an existing --markdown or --junit file (never one of the inputs)");
  return {chk, [args] { return check_command(args->candidate, args->options); }, {}};
}

}  // namespace vramtrace::cli

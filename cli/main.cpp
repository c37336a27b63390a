// The vramtrace command line: registers the subcommands and runs the one asked for.
//
//   run     cli/run.cpp (the launcher: cli/launcher.h)   a command, profiled, and its report
//   plan    cli/run.cpp                                  a PyTorch job's first step, planned
//   check   cli/check.cpp (the gate: cli/gate.h)         CI gate against a baseline
//   diff    cli/diff.cpp                                 two runs compared
//   report  cli/report.cpp                               traces to reports
//   whatif  cli/whatif.cpp (collector/predict/whatif.h)  a run replayed under other settings
//   snapshot cli/snapshot.cpp (cli/live_report.h)        the report of a moment of a running run
//   export  cli/export.cpp (report/perfetto.h, memory_viz.h)  a run for other tools' viewers
//
// Exit codes of vramtrace itself: 2 for bad usage or unrecoverable input; 74 when a report
// cannot be written, stdout included (run: unless the command itself failed, whose exit code or
// signal wins; the gate: unless it failed, whose exit code wins);
// the gate (`check`, `run --baseline`): 1 regression, 3 a candidate process that was not
// profiled, 4 an incomplete measurement (report/check.h). `run` otherwise exits as its command
// did (the same exit code, the same signal).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/gate.h"
#include "cli/launcher.h"
#include "report/json_report.h"

using namespace vramtrace;

int main(int argc, char** argv) {
  cli::no_core_for_vramtrace();
  CLI::App app{"vramtrace: CUDA device-memory profiler"};
  // CLI11's own message, with the words it quotes from the command line made printable.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string out = report::printable(e.what()) + "\n";
    if (a->get_help_ptr() != nullptr)
      out += "Run with " + a->get_help_ptr()->get_name() + " for more information.\n";
    return out;
  });
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("vramtrace ") + VRAMTRACE_VERSION);

  const std::vector<cli::Command> commands = {
      cli::add_run_command(app),      cli::add_plan_command(app),   cli::add_check_command(app),
      cli::add_diff_command(app),     cli::add_report_command(app), cli::add_whatif_command(app),
      cli::add_snapshot_command(app), cli::add_export_command(app)};

  // CLI11 alone says "A subcommand is required" of a mistyped one, without naming the word.
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(),
                   [&](const cli::Command& c) { return c.app->get_name() == argv[1]; })) {
    std::cerr << "vramtrace: '" << report::printable(argv[1])
              << "' is not a vramtrace command: use run, plan, check, diff, report, whatif, "
                 "snapshot or export (vramtrace --help)\n";
    return cli::kExitUsage;
  }
  int parse_argc = argc;
  for (const auto& c : commands)
    if (c.words_for_cli11) parse_argc = std::min(parse_argc, c.words_for_cli11(argc, argv));
  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    if (rc != 0) cli::write_gate_failure_of_args(parse_argc, argv, e.what());
    return rc == 0 ? 0 : cli::kExitUsage;
  }
  for (const auto& c : commands)
    if (*c.app) return cli::stdout_checked(c.run());
  return cli::kExitUsage;
}

// `vramtrace run [OPTIONS] [--] COMMAND...`: runs COMMAND under the launcher (cli/launcher.h),
// writes its report, checks it against a baseline when asked, and exits as COMMAND did.
// Options end at the first word of COMMAND, as with nsys and memray: what follows is COMMAND's.
// `vramtrace plan [OPTIONS] [--] COMMAND...`: the same run, with the start-up hook told to stop
// each PyTorch process before its first training step once that step is predicted on fake
// tensors; the report holds the plan (collector/predict/plan.h), and it exits 0 when one was
// made.
#include <sys/wait.h>

#include <cstring>
#include <iostream>
#include <memory>

#include "cli/check_load.h"
#include "cli/commands.h"
#include "cli/gate.h"
#include "cli/launcher.h"
#include "cli/live_report.h"
#include "cli/preflight.h"
#include "cli/serve.h"
#include "cli/snapshot.h"

namespace vramtrace::cli {
namespace {

struct RunArgs {
  const char* name = "run";  // the subcommand: "run" or "plan"
  LaunchOptions launch;
  CheckOptions check;
  bool no_progress = false;
  std::string serve;  // --serve's address ("" alone)
  CLI::Option* serve_option = nullptr;
  std::vector<std::string> cmd;
};

// A word that `--serve 8080 CMD` meant as --serve's address (a port, or ADDR:PORT).
bool looks_like_address(const std::string& w) {
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 5 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  const size_t colon = w.rfind(':');
  return digits(w) || (colon != std::string::npos && colon > 0 && digits(w.substr(colon + 1)) &&
                       w.find('/') == std::string::npos);
}

// What the CI files of `run --baseline` must never replace: the baseline, and the reports and
// run marker that the run itself writes into its -o folder.
std::vector<std::string> run_inputs(const RunArgs& a) {
  std::vector<std::string> out = {a.check.baseline};
  if (!a.launch.out_dir.empty())
    for (const char* own : {"report.json", "report.html", kRunMarker})
      out.push_back(a.launch.out_dir + "/" + own);
  return out;
}

// `plan`'s exit: 0 when a process stopped for a plan (the report holds it), else, said, the
// command's own (2 for a command that exited 0 without reaching a training step).
int plan_exit(const nlohmann::json& report_json, int status, int written) {
  const auto plan = report_json.find("plan");
  if (plan != report_json.end() && plan->is_object() &&
      !plan->value("processes", nlohmann::json()).empty())
    return written;
  std::cerr << "vramtrace plan: no process reached a training step (the first call of a module "
               "with parameters in training mode, gradients on): no plan\n";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return kExitUsage;
  return exit_as_command(status, written);
}

int run_command(const RunArgs& a) {
  CheckOptions check = a.check;
  check.force = a.launch.force;  // run's --force also replaces its CI files
  if (!check.baseline.empty() && !ci_files_allowed(check, run_inputs(a), "vramtrace run"))
    return kExitUsage;
  // With --baseline, bad budgets or a bad baseline are found before the command runs.
  collector::ReportRead baseline;
  if (!check.baseline.empty()) {
    if (!input_is_one_run(check.baseline, "vramtrace run")) {
      write_gate_failure(check, check.baseline + ": traces of different runs");
      return kExitUsage;
    }
    try {
      budgets_of(check);
      baseline = load_report(check.baseline, "baseline");
      collector::require_profiled_baseline(baseline, check.baseline);
    } catch (const collector::CheckError& e) {
      std::cerr << "vramtrace run: " << report::printable(e.what()) << "\n";
      write_gate_failure(check, e.what());
      return kExitUsage;
    }
  }
  if (a.cmd.empty()) {
    std::cerr << "command is required\nRun with --help for more information.\n";
    return kExitUsage;
  }
  if (a.launch.preflight && a.launch.stacks.torch == "off") {
    std::cerr << "vramtrace run: --preflight needs the start-up hook that --torch=off leaves out\n";
    return kExitUsage;
  }
  if (a.launch.plan && a.launch.stacks.torch == "off") {
    std::cerr << "vramtrace plan: --torch=off leaves out the start-up hook that makes the plan\n";
    return kExitUsage;
  }

  const bool serving = a.serve_option && a.serve_option->count() > 0;
  if (serving && a.serve.empty() && looks_like_address(a.cmd[0])) {
    std::cerr << "vramtrace run: --serve takes its address after '=' (--serve="
              << report::printable(a.cmd[0]) << "): '" << report::printable(a.cmd[0])
              << "' would be run as the command\n";
    return kExitUsage;
  }

  Launch launch(a.launch, a.cmd);
  if (int rc = launch.prepare()) return rc;
  // The report of any moment, for the page and for snapshots (SIGUSR2, `vramtrace snapshot`).
  LiveReport live(
      launch.out_dir(), [&launch] { return launch.state_now(); }, launch.torch_request_path());
  std::unique_ptr<Server> server;
  if (serving) {
    // Before the command starts: a port in use is said, and nothing has run.
    server = Server::start(a.serve, live, "vramtrace run");
    if (!server) {
      launch.discard();
      if (!check.baseline.empty()) write_gate_failure(check, "--serve could not listen");
      return kExitUsage;
    }
    std::cerr << "vramtrace: live report: " << server->url() << "\n";
  }
  auto snapshots = std::make_unique<SnapshotTaker>(launch.out_dir(), live);
  std::unique_ptr<PreflightDesk> preflight;
  if (!launch.preflight_folder().empty())
    preflight = std::make_unique<PreflightDesk>(launch.preflight_folder(), launch.out_dir());
  if (int rc = launch.spawn()) return rc;
  const report::RunInfo info = launch.wait([&snapshots, &live, &preflight] {
    snapshots.reset();
    preflight.reset();
    live.hold();
  });
  if (const int err = launch.exec_errno()) {
    // The command never started (its own line said why): no run, so no report and no folder.
    launch.discard();
    if (!check.baseline.empty())
      write_gate_failure(check, "the command could not be run (" + std::string(std::strerror(err)) +
                                    "): not checked");
    return exit_as_command(launch.status(), 0);
  }

  if (launch.traces().empty())
    std::cerr << "vramtrace: no process of the command used CUDA; no device memory to report\n";
  nlohmann::json report_json;
  const int written =
      write_reports(launch.traces(), launch.out_dir(), info, &report_json, a.no_progress);
  if (server) {
    // The pages open now get the final report, then the server stops: vramtrace ends with
    // its command, as without --serve (the page keeps what it shows).
    live.finish(report_json);
    server->linger(10000, [] { return signalled_after_command(); });
    server.reset();
  }
  const int status = launch.status();
  if (a.launch.plan) return plan_exit(report_json, status, written);
  const bool command_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!check.baseline.empty() && command_ok && written == 0)
    return gate(baseline, report_json, check, "vramtrace run");
  if (!check.baseline.empty())
    write_gate_failure(
        check, written != 0 && command_ok
                   ? std::string("the report could not be written: not checked")
               : WIFSIGNALED(status)
                   ? "the command was killed by signal " + std::to_string(WTERMSIG(status)) +
                         ": not checked"
                   : "the command exited " + std::to_string(WEXITSTATUS(status)) + ": not checked");
  return exit_as_command(status, written);
}

// Where the options of `run` end and its command begins: at "--", or at the first word that
// is neither an option nor an option's value. argv[first] is the first word after "run".
// Returns the index of the command's first word (argc when there is none) and whether a "--"
// was there (it is not passed on).
std::pair<int, bool> command_start(CLI::App* run, int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") return {i + 1, true};
    if (a.size() < 2 || a[0] != '-') return {i, false};
    std::string name = a.substr(0, a.find('='));
    if (a.rfind("--", 0) != 0 && a.size() > 2) name = a.substr(0, 2);  // -oDIR
    const CLI::Option* opt = run->get_option_no_throw(name);
    if (!opt) continue;  // unknown: CLI11 says so
    const bool inline_value =
        a.find('=') != std::string::npos || (a.rfind("--", 0) != 0 && a.size() > 2);
    if (opt->get_expected_min() > 0 && !inline_value) ++i;  // its value
  }
  return {argc, false};
}

// The first word after the subcommand `name` (argv[i] == name with only options before it).
int run_position(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return i;
    if (argv[i][0] != '-') return 0;
  }
  return 0;
}

}  // namespace

namespace {

Command add_launch_command(CLI::App& app, bool plan) {
  auto args = std::make_shared<RunArgs>();
  args->name = plan ? "plan" : "run";
  LaunchOptions& launch = args->launch;
  launch.plan = plan;
  StackOptions& stacks = launch.stacks;
  auto* run = app.add_subcommand(
      args->name,
      plan ? "Plan a PyTorch training job's memory before it runs: vramtrace plan [OPTIONS] [--] "
             "COMMAND [ARGS...] runs COMMAND as `run` does up to its first training step, "
             "predicts that whole step on fake tensors (at its batch and its half, with bf16 "
             "autocast, with checkpointing), ends the program (exit 0) before the step "
             "allocates anything, and prints the plan: the step's peak against the limit, the "
             "largest batch that fits, each remedy's peak. Options as run's."
           : "Run a command under vramtrace and write its report: vramtrace run [OPTIONS] [--] "
             "COMMAND [ARGS...]. Options end at the first word of COMMAND: what follows is the "
             "command's.");
  run->add_option("-o,--output", launch.out_dir,
                  "Directory for report.json and the raw traces (default: a new "
                  "vramtrace-out/run-N); one that holds an earlier output needs --force")
      ->check(folder_name());
  run->add_flag("--force", launch.force,
                "Replace the earlier output in the -o directory (its reports and traces; other "
                "files are left alone)");
  run->add_option("--lib", launch.lib, "Path of libvramtrace.so (default: next to this program)");
  run->add_option("--grace-ms", launch.grace_ms,
                  "How long to wait for other processes' streams after the command ends")
      ->capture_default_str()
      ->transform(decimal_range(0, 3'600'000));
  run->add_option("--stacks", stacks.mode,
                  "Stacks at allocations: auto (the default: native frames and the allocating "
                  "thread's Python frames, GIL held or not; stream-ordered allocations only when "
                  "they fail or are >= VRAMTRACE_ASYNC_STACK_MIN_BYTES, 64 MiB), native, python, "
                  "all (every allocation), none")
      ->check(CLI::IsMember({"auto", "none", "native", "python", "all"}));
  run->add_option("--max-depth", stacks.max_depth, "Most frames of a native stack (default 64)")
      ->transform(decimal_range(1, 128));
  run->add_option("--torch", stacks.torch,
                  "PyTorch's allocator trace (blocks inside its segments, its OOMs): auto (on "
                  "when the program imports torch; sampled where it would cost more than 1 % of "
                  "an iteration), full (on throughout), stacks (also the Python line of each "
                  "block: growth by line; costs ~1.7 us per allocation), sampled (blocks in the "
                  "first iterations and every 50th only: what is made and freed between them is "
                  "known, not when) or off")
      ->check(CLI::IsMember({"auto", "full", "stacks", "sampled", "off"}))
      ->capture_default_str();
  run->add_option("--launches", stacks.launches,
                  "Kernel launches: by default recorded (counts by kernel, the kernel at the "
                  "peak, iterations from the launch rhythm), except in PyTorch processes, where "
                  "the start-up hook marks the iterations and stops them after the second; on: "
                  "recorded in every process, all run long; off: their CUPTI callbacks are not "
                  "enabled (less overhead on launch-bound jobs, allocations recorded as ever)")
      ->check(CLI::IsMember({"on", "off"}));
  if (!plan)
    run->add_flag("--preflight", launch.preflight,
                  "PyTorch jobs: at the first training step, before it allocates, predict the "
                  "whole step on fake tensors (as `vramtrace plan` does, costing its seconds), "
                  "say on stderr whether it will fit (if not: by how much, the largest batch "
                  "that fits, the remedies), then let the program go on; the report holds the "
                  "prediction beside the step as recorded (report.json's preflight). The hook "
                  "waits up to VRAMTRACE_PREFLIGHT_WAIT seconds (30) for the verdict");
  run->add_flag("--no-progress", args->no_progress, kProgressHelp);
  args->serve_option =
      run->add_option("--serve", args->serve,
                      "Serve the report page, updating itself, and /report.json of each moment "
                      "while the command runs: --serve alone on 127.0.0.1 and any free port, "
                      "or --serve=PORT, --serve=ADDR:PORT (an address that is not loopback "
                      "needs the random token of the URL printed on stderr). Read-only")
          ->expected(0, 1);
  auto* run_baseline =
      run->add_option("--baseline", args->check.baseline,
                      "Check the run against this baseline (report.json, trace or run directory)");
  add_budget_options(run, args->check);
  // Without --baseline these would be ignored, and a CI job would pass without its gate.
  for (const char* name : {"--max-increase", "--max-peak", "--device", "--markdown", "--junit"})
    run->get_option(name)->needs(run_baseline);

  // `run`'s options end where its command begins: CLI11 sees only what comes before.
  auto words_for_cli11 = [args, run](int argc, char** argv) {
    int at = run_position(argc, argv, args->name);
    if (at == 0) return argc;
    auto [start, dashes] = command_start(run, argc, argv, at + 1);
    for (int i = start; i < argc; ++i) args->cmd.push_back(argv[i]);
    return dashes ? start - 1 : start;
  };
  return {run, [args] { return run_command(*args); }, words_for_cli11};
}

}  // namespace

Command add_run_command(CLI::App& app) { return add_launch_command(app, false); }
Command add_plan_command(CLI::App& app) { return add_launch_command(app, true); }

}  // namespace vramtrace::cli

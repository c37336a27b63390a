// The vramtrace command line: `run` (launcher + live collector), `report` (traces -> reports).
//
// `vramtrace run -o DIR -- CMD...` starts a collector on a private Unix socket, runs CMD with the
// preload library in its environment, and when CMD ends, however it ends, writes DIR/report.json
// from every stream that reached it, then exits as CMD did (same exit code, same signal).
// Exit codes of vramtrace itself: 2 for bad usage or unreadable input; the gate (`check`,
// `run --baseline`): 1 regression, 3 a candidate process that was not profiled, 4 an incomplete
// measurement (report/check.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "collector/live_collector.h"
#include "collector/model.h"
#include "report/check.h"
#include "report/html_assets.h"
#include "report/html_report.h"
#include "report/json_report.h"

namespace fs = std::filesystem;
using namespace vramtrace;

namespace {

volatile sig_atomic_t g_child = 0;

void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string find_library(const std::string& given) {
  if (!given.empty()) return fs::absolute(given).string();
  const char* env = getenv("VRAMTRACE_LIB");
  if (env && *env) return fs::absolute(env).string();
  for (const char* rel : {"/../lib/libvramtrace.so", "/../lib/vramtrace/libvramtrace.so",
                          "/libvramtrace.so"}) {
    fs::path p = fs::path(self_dir() + rel).lexically_normal();
    if (fs::exists(p)) return p.string();
  }
  return {};
}

// A whole number in decimal digits only, from lo to hi, with CLI::Range's message. CLI11 alone
// reads "0x10" as 16 and "010" as 8 (octal), and takes "-5" for --grace-ms; the value is handed
// on without its leading zeros, so that CLI11 does not read it as octal either.
CLI::Validator decimal_range(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        if (!v.empty() && v.size() <= 18 &&
            std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          long long x = std::stoll(v);
          if (x >= lo && x <= hi) {
            v = std::to_string(x);
            return {};
          }
        }
        return "Value " + v + " not in range " + range;
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

struct CheckOptions {
  std::string baseline;
  std::vector<std::string> max_increase, max_peak;
  std::optional<uint32_t> device;
  std::string markdown, junit;
};

// Parses the budgets; throws report::CheckError.
report::Budgets budgets_of(const CheckOptions& o) {
  report::Budgets b;
  for (const auto& v : o.max_increase) report::add_increase_option(b, v);
  for (const auto& v : o.max_peak) report::add_peak_option(b, v);
  b.only_device = o.device;
  return b;
}

// When the gate cannot compare (bad input, a command that failed): the CI files named by
// --markdown and --junit still appear, failing and saying why, so that a CI page never shows a
// stale or missing result as a pass.
void write_gate_failure(const CheckOptions& o, const std::string& why) {
  if (!o.markdown.empty()) write_private_file(o.markdown, report::failure_markdown(why));
  if (!o.junit.empty()) write_private_file(o.junit, report::failure_junit(why));
}

// Prints the verdict and writes the CI files. Returns 0 within budget, 1 on regression, 3 when
// the candidate has a process that was not profiled, 4 when it is an incomplete measurement
// (report::gate_exit_code), 2 when a file cannot be written.
int gate(const nlohmann::json& baseline, const nlohmann::json& candidate, const CheckOptions& o,
         const char* who) {
  report::CheckResult r;
  try {
    r = report::compare(baseline, candidate, budgets_of(o));
  } catch (const report::CheckError& e) {  // a device neither run has (known only now in `run`)
    std::cerr << who << ": " << e.what() << "\n";
    write_gate_failure(o, e.what());
    return 2;
  }
  std::cout << report::check_text(r) << std::flush;
  if (!o.markdown.empty() && !write_private_file(o.markdown, report::check_markdown(r))) return 2;
  if (!o.junit.empty() && !write_private_file(o.junit, report::check_junit(r))) return 2;
  return report::gate_exit_code(r);
}

int check_command(const std::string& candidate, const CheckOptions& o) {
  try {
    budgets_of(o);
    nlohmann::json base = report::load_report(o.baseline, "baseline");
    report::require_profiled_baseline(base, o.baseline);
    nlohmann::json cand = report::load_report(candidate, "candidate");
    return gate(base, cand, o, "vramtrace check");
  } catch (const report::CheckError& e) {
    std::cerr << "vramtrace check: " << e.what() << "\n";
    write_gate_failure(o, e.what());
    return 2;
  }
}

int diff_command(const std::string& a, const std::string& b, const std::string& html) {
  try {
    nlohmann::json ja = report::load_report(a, "A");
    nlohmann::json jb = report::load_report(b, "B");
    report::Budgets none;
    none.max_increase = report::Budget{0.0, std::nullopt};
    report::CheckResult r = report::compare(ja, jb, none);
    std::cout << report::diff_text(ja, jb, r) << std::flush;
    if (!html.empty() && !write_private_file(html, report::diff_html(ja, jb, r))) return 2;
    return 0;
  } catch (const report::CheckError& e) {
    std::cerr << "vramtrace diff: " << e.what() << "\n";
    return 2;
  }
}

// What `run` asks the library to record: at each allocation (VRAMTRACE_STACKS, _MAX_DEPTH),
// PyTorch's allocator trace, and kernel launches (VRAMTRACE_LAUNCHES).
struct StackOptions {
  std::string mode;  // none|native|python|all; empty: the library's default (all)
  int max_depth = 0;  // 0: the library's default (64)
  // auto: PyTorch's allocator trace when the program imports torch; stacks: with the Python
  // frames of each block (costs what PyTorch's own recorder costs); off.
  std::string torch = "auto";
  // on|off (VRAMTRACE_LAUNCHES); empty: the library's default (on). off: the launch callbacks
  // are not enabled, for launch-bound jobs.
  std::string launches;
};

bool is_torch_trace(const fs::path& p) {
  return p.filename().string().rfind("vramtrace.", 0) == 0 &&
         (p.extension() == ".torch" || p.extension() == ".jax");
}

// Writes the Python start-up hook into DIR/.python (private) and returns that folder.
std::string write_torch_hook(const std::string& out_dir) {
  std::string dir = out_dir + "/.python";
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (!write_private_file(dir + "/sitecustomize.py", report::assets::torch_hook)) return {};
  return fs::absolute(dir).string();
}

int run_command(const std::string& out_dir, const std::string& lib_opt, int grace_ms,
                const std::vector<std::string>& cmd, const CheckOptions& check,
                const StackOptions& stacks, bool no_progress) {
  // With --baseline, bad budgets or a bad baseline are found before the command runs.
  nlohmann::json baseline;
  if (!check.baseline.empty()) {
    try {
      budgets_of(check);
      baseline = report::load_report(check.baseline, "baseline");
      report::require_profiled_baseline(baseline, check.baseline);
    } catch (const report::CheckError& e) {
      std::cerr << "vramtrace run: " << e.what() << "\n";
      write_gate_failure(check, e.what());
      return 2;
    }
  }
  if (cmd.empty()) {
    std::cerr << "vramtrace run: no command given (usage: vramtrace run -o DIR -- CMD...)\n";
    return 2;
  }
  std::string lib = find_library(lib_opt);
  if (lib.empty() || !fs::exists(lib)) {
    std::cerr << "vramtrace run: cannot find libvramtrace.so (use --lib or VRAMTRACE_LIB)\n";
    return 2;
  }
  if (!ensure_output_dir(out_dir)) return 2;
  // Traces of an earlier run into the same directory would be merged by `vramtrace report DIR`.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if ((name.rfind("vramtrace.", 0) == 0 && entry.path().extension() == ".vtrace") ||
        is_torch_trace(entry.path()))
      fs::remove(entry.path(), ec);
  }

  std::string hook_dir;
  if (stacks.torch != "off") hook_dir = write_torch_hook(out_dir);

  std::unique_ptr<collector::LiveCollector> live;
  try {
    live = std::make_unique<collector::LiveCollector>(out_dir);
  } catch (const std::exception& e) {
    std::cerr << "vramtrace run: " << e.what() << "\n";
    return 2;
  }

  // The launcher outlives its child: ^C goes to the whole process group and the child decides;
  // SIGTERM and SIGHUP, which come to us alone, are passed on.
  struct sigaction ign{}, fwd{}, old_int{}, old_quit{};
  ign.sa_handler = SIG_IGN;
  fwd.sa_handler = forward_signal;
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  sigaction(SIGTERM, &fwd, nullptr);
  sigaction(SIGHUP, &fwd, nullptr);

  pid_t child = fork();
  if (child < 0) {
    std::cerr << "vramtrace run: fork: " << std::strerror(errno) << "\n";
    return 2;
  }
  if (child == 0) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    const char* pre = getenv("LD_PRELOAD");
    std::string preload = lib + (pre && *pre ? std::string(" ") + pre : std::string());
#ifdef VRAMTRACE_SANITIZER_PRELOAD
    // Sanitizer builds (cmake/Sanitize.cmake): the runtime must be loaded first; the leaks of
    // an unsanitized target are not ours to report, and its SIGSEGV stays its own.
    preload = std::string(VRAMTRACE_SANITIZER_PRELOAD) + " " + preload;
    for (const char* var : {"ASAN_OPTIONS", "TSAN_OPTIONS"}) {
      const char* old = getenv(var);
      setenv(var, (std::string(old ? old : "") + ":detect_leaks=0:handle_segv=0").c_str(), 1);
    }
#endif
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
    setenv("VRAMTRACE_SOCKET", live->socket_path().c_str(), 1);
    unsetenv("VRAMTRACE_OUTPUT");
    if (!stacks.mode.empty()) setenv("VRAMTRACE_STACKS", stacks.mode.c_str(), 1);
    if (stacks.max_depth > 0)
      setenv("VRAMTRACE_MAX_DEPTH", std::to_string(stacks.max_depth).c_str(), 1);
    if (!stacks.launches.empty()) setenv("VRAMTRACE_LAUNCHES", stacks.launches.c_str(), 1);
    if (!hook_dir.empty()) {
      const char* py = getenv("PYTHONPATH");
      setenv("PYTHONPATH", (hook_dir + (py && *py ? ":" + std::string(py) : "")).c_str(), 1);
      setenv("VRAMTRACE_TORCH_DIR", fs::absolute(out_dir).c_str(), 1);
      if (stacks.torch == "stacks") setenv("VRAMTRACE_TORCH_STACKS", "1", 1);
    }
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    std::string msg = "vramtrace run: cannot run '" + cmd[0] + "': " + std::strerror(err) + "\n";
    ssize_t ignored = write(2, msg.data(), msg.size());
    (void)ignored;
    _exit(err == ENOENT ? 127 : 126);
  }
  g_child = child;
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;

  std::vector<std::string> traces = live->finish(grace_ms);
  live.reset();
  for (const auto& entry : fs::directory_iterator(out_dir, ec))
    if (is_torch_trace(entry.path())) traces.push_back(entry.path().string());

  report::RunInfo info;
  info.command = cmd;
  if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);

  if (traces.empty())
    std::cerr << "vramtrace: no process of the command used CUDA; no device memory to report\n";
  nlohmann::json report_json;
  write_reports(traces, out_dir, info, &report_json, no_progress);
  const bool command_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!check.baseline.empty() && command_ok) return gate(baseline, report_json, check, "vramtrace run");
  if (!check.baseline.empty())
    write_gate_failure(check, WIFSIGNALED(status)
                                  ? "the command was killed by signal " +
                                        std::to_string(WTERMSIG(status)) + ": not checked"
                                  : "the command exited " + std::to_string(WEXITSTATUS(status)) +
                                        ": not checked");

  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::cout.flush();
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    kill(getpid(), sig);
    return 128 + sig;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

bool ensure_output_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      std::cerr << "vramtrace: cannot create " << dir << ": " << ec.message() << "\n";
      return false;
    }
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  } else if (!fs::is_directory(dir, ec)) {
    std::cerr << "vramtrace: " << dir << " exists and is not a directory\n";
    return false;
  }
  return true;
}

bool write_private_file(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    std::cerr << "vramtrace: cannot write " << path << ": " << std::strerror(errno) << "\n";
    return false;
  }
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::cerr << "vramtrace: cannot write " << path << ": " << std::strerror(errno) << "\n";
      close(fd);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return close(fd) == 0;
}

int write_reports(const std::vector<std::string>& traces, const std::string& out_dir,
                  const report::RunInfo& info, nlohmann::json* report_out, bool no_progress) {
  collector::Run run;
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  std::vector<std::string> unreadable;
  std::vector<std::string> torch;
  uint64_t total_bytes = 0;
  for (const auto& t : traces) {
    if (is_torch_trace(t)) {
      torch.push_back(t);
      continue;
    }
    try {
      readers.push_back(std::make_unique<collector::TraceReader>(t));
      std::error_code ec;
      uintmax_t size = fs::file_size(t, ec);
      if (!ec) total_bytes += size;
    } catch (const collector::TraceError& e) {
      unreadable.push_back(e.what());
    }
  }
  {
    cli::ReadProgress progress(total_bytes, cli::ReadProgress::mode_from_env(no_progress));
    if (progress.shown())
      for (auto& r : readers) r->on_progress([&progress](uint64_t n) { progress.add(n); });
    run = collector::analyze(std::move(readers), torch);
  }  // the bar is cleared before the summary
  for (auto& u : unreadable) run.problems.push_back(u);
  nlohmann::json j = report::to_json(run, info);
  std::string path = out_dir + "/report.json";
  bool ok = write_private_file(
      path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::string html = out_dir + "/report.html";
  ok = write_private_file(html, report::to_html(j)) && ok;
  std::cerr << report::summary_text(j);
  if (ok) std::cerr << "vramtrace: report: " << html << " (and report.json)\n";
  if (report_out) *report_out = std::move(j);
  return ok ? 0 : 2;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool* ok) {
  std::vector<std::string> out;
  *ok = true;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(in, ec))
        if (entry.path().extension() == ".vtrace" || is_torch_trace(entry.path()))
          found.push_back(entry.path().string());
      std::sort(found.begin(), found.end());
      if (found.empty()) {
        std::cerr << "vramtrace: " << in << ": no .vtrace files in this directory\n";
        *ok = false;
      }
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(in, ec)) {
      out.push_back(in);
    } else {
      std::cerr << "vramtrace: " << in << ": no such file or directory\n";
      *ok = false;
    }
  }
  return out;
}

int main(int argc, char** argv) {
  CLI::App app{"vramtrace: CUDA device-memory profiler"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("vramtrace ") + VRAMTRACE_VERSION);

  std::string run_out = "vramtrace-out";
  std::string lib;
  int grace_ms = 5000;
  std::vector<std::string> cmd;
  auto* run = app.add_subcommand("run", "Run a command under vramtrace and write its report");
  run->add_option("-o,--output", run_out, "Directory for report.json and the raw traces")
      ->capture_default_str();
  run->add_option("--lib", lib, "Path of libvramtrace.so (default: next to this program)");
  run->add_option("--grace-ms", grace_ms,
                  "How long to wait for other processes' streams after the command ends")
      ->capture_default_str()
      ->transform(decimal_range(0, 3'600'000));
  StackOptions stacks;
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
                  "when the program imports torch), stacks (also the Python line of each block: "
                  "growth by line; costs ~1.7 us per allocation) or off")
      ->check(CLI::IsMember({"auto", "stacks", "off"}))
      ->capture_default_str();
  run->add_option("--launches", stacks.launches,
                  "Kernel launches: on (the default: counts by kernel, the kernel at the peak, "
                  "iterations from the launch rhythm) or off (their CUPTI callbacks are not "
                  "enabled: less overhead on launch-bound jobs, allocations recorded as ever)")
      ->check(CLI::IsMember({"on", "off"}));
  bool no_progress = false;
  const char* progress_help =
      "No progress bar while reading traces (drawn on a terminal only, for traces of 64 MiB or "
      "more; VRAMTRACE_PROGRESS=auto|on|off)";
  run->add_flag("--no-progress", no_progress, progress_help);
  run->add_option("command", cmd, "The command to run, after --")->required();
  run->prefix_command();
  CheckOptions run_check;
  auto add_budget_options = [](CLI::App* app, CheckOptions& o) {
    app->add_option("--max-increase", o.max_increase,
                    "Allowed growth of the peak over the baseline: 5% or 256MiB; DEVICE:BUDGET "
                    "for one device (default 5%)");
    app->add_option("--max-peak", o.max_peak, "Largest allowed peak, e.g. 40GiB; or DEVICE:SIZE");
    app->add_option("--device", o.device, "Check this device only")
        ->transform(decimal_range(0, 4095));  // a larger ordinal is a corrupt record
    app->add_option("--markdown", o.markdown, "Write a Markdown summary for a CI job page");
    app->add_option("--junit", o.junit, "Write a JUnit XML result");
  };
  auto* run_baseline = run->add_option(
      "--baseline", run_check.baseline,
      "Check the run against this baseline (report.json, trace or run directory)");
  add_budget_options(run, run_check);
  // Without --baseline these would be ignored, and a CI job would pass without its gate.
  for (const char* name : {"--max-increase", "--max-peak", "--device", "--markdown", "--junit"})
    run->get_option(name)->needs(run_baseline);

  CheckOptions check_opts;
  std::string candidate;
  auto* chk = app.add_subcommand("check", "CI gate: exit 1 when the peak grew past its budget");
  chk->add_option("candidate", candidate, "report.json, trace or run directory")->required();
  chk->add_option("--baseline", check_opts.baseline, "report.json, trace or run directory")
      ->required();
  add_budget_options(chk, check_opts);

  std::string diff_a, diff_b, diff_html;
  auto* dif = app.add_subcommand("diff", "Compare two runs: peaks and what was live at them");
  dif->add_option("a", diff_a, "The earlier run (report.json, trace or run directory)")->required();
  dif->add_option("b", diff_b, "The later run")->required();
  dif->add_option("--html", diff_html, "Also write the comparison as an HTML file");

  std::vector<std::string> inputs;
  std::string report_out = ".";
  auto* rep = app.add_subcommand("report", "Turn traces (files or directories) into reports");
  rep->add_option("traces", inputs, "Trace files or directories of them")->required();
  rep->add_option("-o,--output", report_out, "Directory for report.json")->capture_default_str();
  rep->add_flag("--no-progress", no_progress, progress_help);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (*run) return run_command(run_out, lib, grace_ms, cmd, run_check, stacks, no_progress);
  if (*chk) return check_command(candidate, check_opts);
  if (*dif) return diff_command(diff_a, diff_b, diff_html);
  if (*rep) {
    bool ok = true;
    std::vector<std::string> traces = expand_inputs(inputs, &ok);
    if (!ok) return 2;
    if (!ensure_output_dir(report_out)) return 2;
    // Refuse what is not a trace before writing anything.
    // (PyTorch's allocator traces are read with the trace of their process: a bad one is a
    // problem of the report, not a refusal.)
    for (const auto& t : traces) {
      if (is_torch_trace(t)) continue;
      try {
        collector::TraceReader probe(t);
      } catch (const collector::TraceError& e) {
        std::cerr << "vramtrace report: " << e.what() << "\n";
        return 2;
      }
    }
    return write_reports(traces, report_out, {}, nullptr, no_progress);
  }
  return 2;
}

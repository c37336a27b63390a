// The vramtrace command line: `run` (launcher + live collector), `report` (traces -> reports).
//
// `vramtrace run [-o DIR] [--] CMD...` starts a collector on a private Unix socket, runs CMD (in a
// process group of its own) with the preload library in its environment, and when CMD ends,
// however it ends, writes DIR/report.json from every stream that reached it, then exits as CMD
// did (same exit code, same signal). Options end at the first word of CMD, as with nsys and
// memray: what follows is CMD's. Without -o each run gets a new folder, vramtrace-out/run-N; an
// earlier run's output is replaced only with --force.
// Exit codes of vramtrace itself: 2 for bad usage or unreadable input; 74 when a report cannot
// be written (run: unless CMD itself failed, whose exit code or signal wins); the gate (`check`,
// `run --baseline`): 1 regression, 3 a candidate process that was not profiled, 4 an incomplete
// measurement (report/check.h).
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "collector/live_collector.h"
#include "collector/model.h"
#include "common/env_names.h"
#include "report/check.h"
#include "report/html_assets.h"
#include "report/html_report.h"
#include "report/json_report.h"

namespace fs = std::filesystem;
using namespace vramtrace;

namespace {

// A report that could not be written (full disk, read-only folder): sysexits' EX_IOERR, apart
// from the gate's 1 and 3 and bad usage's 2.
constexpr int kExitWriteFailed = 74;
// Written by `run` into its folder: which run the traces there belong to (`report` refuses to
// merge traces of different runs unless --merge).
constexpr const char* kRunMarker = "vramtrace.run";
constexpr const char* kDefaultOutputRoot = "vramtrace-out";

// The command's process group while it runs: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the
// launcher are passed on to it.
volatile sig_atomic_t g_child_group = 0;

void forward_signal(int sig) {
  if (g_child_group > 0) kill(-static_cast<pid_t>(g_child_group), sig);
}

// The user's core-file limit. vramtrace itself runs with none (when the command crashes and
// vramtrace ends itself with the same signal, the core that is left is the command's, never
// vramtrace's); the command gets the user's limit back.
struct rlimit g_core_limit{RLIM_INFINITY, RLIM_INFINITY};

void no_core_for_vramtrace() {
  if (getrlimit(RLIMIT_CORE, &g_core_limit) != 0) return;
  struct rlimit none{0, g_core_limit.rlim_max};
  setrlimit(RLIMIT_CORE, &none);
  // A report larger than RLIMIT_FSIZE is a failed write (EFBIG, reported), not a death by
  // SIGXFSZ with a truncated file.
  signal(SIGXFSZ, SIG_IGN);
}

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string find_library(const std::string& given) {
  if (!given.empty()) return fs::absolute(given).string();
  const char* env = getenv(env::kLib);
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

bool is_trace_file(const fs::path& p) {
  return (p.filename().string().rfind("vramtrace.", 0) == 0 && p.extension() == ".vtrace") ||
         is_torch_trace(p);
}

// What an earlier run or report left in a folder: its reports, its traces, its run marker.
std::vector<fs::path> earlier_output(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "report.json" || name == "report.html" || name == kRunMarker ||
        is_trace_file(entry.path()))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A new folder ROOT/PREFIX-N (N one more than the highest there), made private; "" when it
// cannot be made (the reason printed).
std::string new_numbered_dir(const std::string& prefix) {
  std::error_code ec;
  if (!fs::exists(kDefaultOutputRoot, ec)) {
    if (mkdir(kDefaultOutputRoot, 0700) != 0 && errno != EEXIST) {
      std::cerr << "vramtrace: cannot create " << kDefaultOutputRoot << ": "
                << std::strerror(errno) << "\n";
      return {};
    }
  }
  unsigned long highest = 0;
  const std::string stem = prefix + "-";
  for (const auto& entry : fs::directory_iterator(kDefaultOutputRoot, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.size() == stem.size() || name.size() > stem.size() + 9)
      continue;
    const std::string digits = name.substr(stem.size());
    if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      highest = std::max(highest, std::stoul(digits));
  }
  // Two runs started at once both try N: the one that loses takes N+1.
  for (unsigned long n = highest + 1; n < highest + 1000; ++n) {
    std::string dir = std::string(kDefaultOutputRoot) + "/" + stem + std::to_string(n);
    if (mkdir(dir.c_str(), 0700) == 0) return dir;
    if (errno != EEXIST) {
      std::cerr << "vramtrace: cannot create " << dir << ": " << std::strerror(errno) << "\n";
      return {};
    }
  }
  std::cerr << "vramtrace: cannot create a new folder in " << kDefaultOutputRoot << "\n";
  return {};
}

// Makes DIR ready for new output. A folder that holds an earlier output is refused unless
// `force`; with it, and `clear_traces` (run, which writes its traces there), the earlier traces
// and run marker are removed, since `report DIR` would merge them with the new ones. Files that
// are not vramtrace's are never touched.
bool prepare_output_dir(const std::string& dir, bool force, bool clear_traces, const char* who) {
  if (!ensure_output_dir(dir)) return false;
  std::vector<fs::path> old = earlier_output(dir);
  // `report` writes reports only: traces there (often its own input) are not in its way.
  if (!clear_traces)
    old.erase(std::remove_if(old.begin(), old.end(),
                             [](const fs::path& p) {
                               return p.filename() != "report.json" &&
                                      p.filename() != "report.html";
                             }),
              old.end());
  if (old.empty()) return true;
  if (!force) {
    std::string names;
    for (size_t i = 0; i < old.size() && i < 3; ++i)
      names += (i ? ", " : "") + report::printable(old[i].filename().string());
    if (old.size() > 3) names += " and " + std::to_string(old.size() - 3) + " more";
    std::cerr << who << ": " << report::printable(dir) << " holds an earlier output (" << names
              << "): use --force to replace it, or another -o\n";
    return false;
  }
  if (clear_traces) {
    std::error_code ec;
    for (const auto& path : old)
      if (is_trace_file(path) || path.filename() == kRunMarker) fs::remove(path, ec);
  }
  return true;
}

// The run that the traces of a folder belong to: its run marker's id ("" without one).
std::string run_id_of_dir(const std::string& dir) {
  std::ifstream in(dir + "/" + kRunMarker);
  if (!in) return {};
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.contains("run_id") && j["run_id"].is_string()) return j["run_id"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return "(unreadable " + std::string(kRunMarker) + ")";
}

std::string new_run_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
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

// The pid in a live trace's name (OUTDIR/vramtrace.<pid>.vtrace), "?" when it has none.
std::string pid_of_trace(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  size_t a = name.find('.'), b = name.rfind('.');
  return a != std::string::npos && b > a + 1 ? name.substr(a + 1, b - a - 1) : "?";
}

// Hands the terminal's foreground to `group` when vramtrace holds it (so that the command reads
// the terminal and gets ^C as it would alone); returns the group to give it back to, or 0.
pid_t give_terminal(pid_t group) {
  if (!isatty(STDIN_FILENO)) return 0;
  pid_t fg = tcgetpgrp(STDIN_FILENO);
  if (fg < 0 || fg != getpgrp()) return 0;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  sigprocmask(SIG_BLOCK, &block, &old);
  int rc = tcsetpgrp(STDIN_FILENO, group);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  return rc == 0 ? fg : 0;
}

void take_terminal_back(pid_t group) {
  if (!group) return;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  sigprocmask(SIG_BLOCK, &block, &old);  // vramtrace is in a background group until then
  tcsetpgrp(STDIN_FILENO, group);
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

int run_command(std::string out_dir, bool force, const std::string& lib_opt, int grace_ms,
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
    std::cerr << "command is required\nRun with --help for more information.\n";
    return 2;
  }
  std::string lib = find_library(lib_opt);
  if (lib.empty() || !fs::exists(lib)) {
    std::cerr << "vramtrace run: cannot find libvramtrace.so (use --lib or VRAMTRACE_LIB)\n";
    return 2;
  }
  if (out_dir.empty()) {
    out_dir = new_numbered_dir("run");
    if (out_dir.empty()) return 2;
  } else if (!prepare_output_dir(out_dir, force, true, "vramtrace run")) {
    return 2;
  }
  std::error_code ec;
  {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    nlohmann::json marker = {{"run_id", new_run_id()},
                             {"host", host},
                             {"pid", getpid()},
                             {"command", cmd}};
    if (!write_private_file(out_dir + "/" + kRunMarker,
                            marker.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                                "\n"))
      return kExitWriteFailed;
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

  // The command runs in a process group of its own. Signals sent to the launcher are passed
  // on to that group; a terminal's ^C reaches it directly when it holds the terminal (below).
  struct sigaction fwd{}, old_int{}, old_quit{}, old_term{}, old_hup{};
  fwd.sa_handler = forward_signal;
  sigemptyset(&fwd.sa_mask);
  fwd.sa_flags = SA_RESTART;
  // Blocked until the group exists, so that a signal that comes before it is passed on too.
  sigset_t fwd_set, old_mask;
  sigemptyset(&fwd_set);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) sigaddset(&fwd_set, sig);
  sigprocmask(SIG_BLOCK, &fwd_set, &old_mask);
  sigaction(SIGINT, &fwd, &old_int);
  sigaction(SIGQUIT, &fwd, &old_quit);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);

  pid_t child = fork();
  if (child < 0) {
    std::cerr << "vramtrace run: fork: " << std::strerror(errno) << "\n";
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return 2;
  }
  if (child == 0) {
    setpgid(0, 0);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    signal(SIGXFSZ, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    setrlimit(RLIMIT_CORE, &g_core_limit);  // the command's own core files, as without vramtrace
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
    setenv(env::kSocket, live->socket_path().c_str(), 1);
    unsetenv(env::kOutput);
    if (!stacks.mode.empty()) setenv(env::kStacks, stacks.mode.c_str(), 1);
    if (stacks.max_depth > 0)
      setenv(env::kMaxDepth, std::to_string(stacks.max_depth).c_str(), 1);
    if (!stacks.launches.empty()) setenv(env::kLaunches, stacks.launches.c_str(), 1);
    if (!hook_dir.empty()) {
      const char* py = getenv("PYTHONPATH");
      setenv("PYTHONPATH", (hook_dir + (py && *py ? ":" + std::string(py) : "")).c_str(), 1);
      setenv(env::kTorchDir, fs::absolute(out_dir).c_str(), 1);
      if (stacks.torch == "stacks") setenv(env::kTorchStacks, "1", 1);
    }
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    std::string msg = "vramtrace run: cannot run '" + report::printable(cmd[0]) +
                      "': " + std::strerror(err) + "\n";
    ssize_t ignored = write(2, msg.data(), msg.size());
    (void)ignored;
    _exit(err == ENOENT ? 127 : 126);
  }
  setpgid(child, child);  // also here: the child may not have run yet
  g_child_group = child;
  const pid_t terminal_owner = give_terminal(child);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  take_terminal_back(terminal_owner);

  // Processes of the command that outlive it (daemons, workers left behind) are still sending:
  // wait for them, within --grace-ms, and say so.
  if (int still = live->open_connections(); still > 0 && grace_ms > 0)
    std::cerr << "vramtrace: the command has ended; waiting up to " << grace_ms / 1000.0
              << " s (--grace-ms) for " << still << " process(es) still running\n";
  std::vector<std::string> traces = live->finish(grace_ms);
  std::vector<std::string> still_running = live->still_open();
  live.reset();
  g_child_group = 0;  // after the wait: a signal meanwhile still reaches what is left of it
  if (!still_running.empty()) {
    std::string pids;
    for (size_t i = 0; i < still_running.size(); ++i)
      pids += (i ? ", " : "") + pid_of_trace(still_running[i]);
    std::cerr << "vramtrace: " << still_running.size() << " process(es) still running after "
              << grace_ms / 1000.0 << " s (pid " << pids
              << "): reported as still running, their memory then is not counted as leaked\n";
  }
  for (const auto& entry : fs::directory_iterator(out_dir, ec))
    if (is_torch_trace(entry.path())) traces.push_back(entry.path().string());

  report::RunInfo info;
  info.command = cmd;
  info.still_running = still_running;
  if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);

  if (traces.empty())
    std::cerr << "vramtrace: no process of the command used CUDA; no device memory to report\n";
  nlohmann::json report_json;
  const int written = write_reports(traces, out_dir, info, &report_json, no_progress);
  const bool command_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!check.baseline.empty() && command_ok && written == 0)
    return gate(baseline, report_json, check, "vramtrace run");
  if (!check.baseline.empty())
    write_gate_failure(check, written != 0 && command_ok
                                  ? std::string("the report could not be written: not checked")
                              : WIFSIGNALED(status)
                                  ? "the command was killed by signal " +
                                        std::to_string(WTERMSIG(status)) + ": not checked"
                                  : "the command exited " + std::to_string(WEXITSTATUS(status)) +
                                        ": not checked");

  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::cout.flush();
    // The command's core file (if it left one) stays the only one: vramtrace's limit is 0, and
    // a process that is not dumpable leaves none even where cores go to a program.
    prctl(PR_SET_DUMPABLE, 0);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    kill(getpid(), sig);
    return 128 + sig;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  // The command's own failure wins; a run that succeeded but whose report is missing did not.
  return code != 0 ? code : written;
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

std::string stage_private_file(const std::string& path, const std::string& content) {
  fs::path target(path);
  std::string dir = target.parent_path().string();
  std::string tmp = (dir.empty() ? std::string(".") : dir) + "/." +
                    target.filename().string() + ".tmp-XXXXXX";
  auto fail = [&](int err) {
    std::cerr << "vramtrace: cannot write " << path << ": " << std::strerror(err) << "\n";
    return std::string();
  };
  int fd = mkostemp(tmp.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) return fail(errno);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return fail(err);
    }
    off += static_cast<size_t>(n);
  }
  // A full disk may answer only now (delayed allocation).
  if (fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return fail(err);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return fail(err);
  }
  return tmp;
}

bool commit_private_file(const std::string& tmp, const std::string& path) {
  // rename() replaces the name itself: a symlink there is replaced, never followed.
  if (rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::cerr << "vramtrace: cannot write " << path << ": " << std::strerror(errno) << "\n";
  unlink(tmp.c_str());
  return false;
}

bool write_private_file(const std::string& path, const std::string& content) {
  std::string tmp = stage_private_file(path, content);
  return !tmp.empty() && commit_private_file(tmp, path);
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
  // `report` given traces of which nothing could be read (corrupt from their first frame):
  // there is no report to write, and "no device memory was used" would be a false answer. (A
  // well-formed trace without events, of a process killed before its first write, is not
  // corrupt: it is reported as such.)
  if (info.command.empty() && !traces.empty()) {
    bool anything = false, corrupt = !unreadable.empty();
    for (const auto& p : run.processes) {
      anything = anything || p.has_process_record || p.events;
      corrupt = corrupt || !p.problem.empty();
    }
    if (!anything && corrupt) {
      for (const auto& problem : run.problems)
        std::cerr << "vramtrace report: " << report::printable(problem) << "\n";
      std::cerr << "vramtrace report: nothing could be read from the input: no report written\n";
      return 2;
    }
  }
  nlohmann::json j = report::to_json(run, info);
  // Both files are written aside and renamed into place only when both are whole: a failure
  // leaves the folder as it was, with no truncated report.
  const std::string path = out_dir + "/report.json", html = out_dir + "/report.html";
  std::string tmp_json = stage_private_file(
      path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::string tmp_html = tmp_json.empty() ? std::string() : stage_private_file(html, report::to_html(j));
  bool ok = !tmp_json.empty() && !tmp_html.empty();
  if (ok) ok = commit_private_file(tmp_json, path) && commit_private_file(tmp_html, html);
  if (!ok) {
    if (!tmp_json.empty()) unlink(tmp_json.c_str());
    if (!tmp_html.empty()) unlink(tmp_html.c_str());
  }
  std::cerr << report::summary_text(j);
  if (ok)
    std::cerr << "vramtrace: report: " << report::printable(html) << " (and report.json)\n";
  else
    std::cerr << "vramtrace: ERROR: the report could not be written into "
              << report::printable(out_dir) << " (exit " << kExitWriteFailed << ")\n";
  if (report_out) *report_out = std::move(j);
  return ok ? 0 : kExitWriteFailed;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool* ok) {
  std::vector<std::string> out;
  *ok = true;
  std::set<std::pair<dev_t, ino_t>> seen;  // one file named twice (or through a link) counts once
  auto add = [&](const std::string& path) {
    struct stat st{};
    if (stat(path.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) {
      std::cerr << "vramtrace: " << report::printable(path)
                << ": the same trace as one given before: counted once\n";
      return;
    }
    out.push_back(path);
  };
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
      for (const auto& f : found) add(f);
    } else if (fs::exists(in, ec)) {
      add(in);
    } else {
      std::cerr << "vramtrace: " << in << ": no such file or directory\n";
      *ok = false;
    }
  }
  return out;
}

namespace {

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
    const bool inline_value = a.find('=') != std::string::npos ||
                              (a.rfind("--", 0) != 0 && a.size() > 2);
    if (opt->get_expected_min() > 0 && !inline_value) ++i;  // its value
  }
  return {argc, false};
}

// The first word after the subcommand "run" (argv[i] == "run" with only options before it).
int run_position(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "run") == 0) return i;
    if (argv[i][0] != '-') return 0;
  }
  return 0;
}

// A trace's identity: the process it recorded (host, pid, start times), from its first record.
std::optional<std::string> process_identity(const std::string& path) {
  try {
    collector::TraceReader r(path);
    collector::Record e;
    if (!r.next(e) || e.type != format::RecordType::Process) return std::nullopt;
    return std::string(e.process.host) + "/" + std::to_string(e.process.pid) + "/" +
           std::to_string(e.process.realtime_ns) + "/" + std::to_string(e.process.start_ns);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  no_core_for_vramtrace();
  CLI::App app{"vramtrace: CUDA device-memory profiler"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("vramtrace ") + VRAMTRACE_VERSION);

  std::string run_out;
  std::string lib;
  int grace_ms = 5000;
  bool force = false;
  auto* run = app.add_subcommand(
      "run",
      "Run a command under vramtrace and write its report: vramtrace run [OPTIONS] [--] "
      "COMMAND [ARGS...]. Options end at the first word of COMMAND: what follows is the "
      "command's.");
  run->add_option("-o,--output", run_out,
                  "Directory for report.json and the raw traces (default: a new "
                  "vramtrace-out/run-N); one that holds an earlier output needs --force");
  run->add_flag("--force", force,
                "Replace the earlier output in the -o directory (its reports and traces; other "
                "files are left alone)");
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
  std::string report_out;
  bool merge = false;
  auto* rep = app.add_subcommand("report", "Turn traces (files or directories) into reports");
  rep->add_option("traces", inputs, "Trace files or directories of them")->required();
  rep->add_option("-o,--output", report_out,
                  "Directory for report.json and report.html (default: a new "
                  "vramtrace-out/report-N); one that holds a report needs --force");
  rep->add_flag("--force", force, "Replace the report in the -o directory");
  rep->add_flag("--merge", merge,
                "Merge traces of different runs (different `vramtrace run` folders) into one "
                "report; refused without it");
  rep->add_flag("--no-progress", no_progress, progress_help);

  // `run`'s options end where its command begins: CLI11 sees only what comes before.
  std::vector<std::string> cmd;
  int parse_argc = argc;
  if (int at = run_position(argc, argv); at > 0) {
    auto [start, dashes] = command_start(run, argc, argv, at + 1);
    for (int i = start; i < argc; ++i) cmd.push_back(argv[i]);
    parse_argc = dashes ? start - 1 : start;
  }
  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (*run) return run_command(run_out, force, lib, grace_ms, cmd, run_check, stacks, no_progress);
  if (*chk) return check_command(candidate, check_opts);
  if (*dif) return diff_command(diff_a, diff_b, diff_html);
  if (*rep) {
    bool ok = true;
    std::vector<std::string> traces = expand_inputs(inputs, &ok);
    if (!ok) return 2;
    std::error_code ec;
    if (!report_out.empty() && fs::exists(report_out, ec) && !fs::is_directory(report_out, ec)) {
      std::cerr << "vramtrace: " << report_out << " exists and is not a directory\n";
      return 2;
    }
    // Refuse what is not a trace before writing anything.
    // (PyTorch's allocator traces are read with the trace of their process: a bad one is a
    // problem of the report, not a refusal.)
    std::vector<std::string> kept;
    std::map<std::string, std::string> identities;  // process -> the trace that recorded it
    std::map<std::string, std::vector<std::string>> runs;  // run id -> its traces
    for (const auto& t : traces) {
      if (!is_torch_trace(t)) {
        try {
          collector::TraceReader probe(t);
        } catch (const collector::TraceError& e) {
          std::cerr << "vramtrace report: " << e.what() << "\n";
          return 2;
        }
        // The same process recorded in two files (a copy of a trace): counted once.
        if (auto id = process_identity(t)) {
          auto [it, added] = identities.try_emplace(*id, t);
          if (!added) {
            std::cerr << "vramtrace: " << report::printable(t)
                      << ": the same process as " << report::printable(it->second)
                      << ": counted once\n";
            continue;
          }
        }
      }
      std::string dir = fs::path(t).parent_path().string();
      runs[run_id_of_dir(dir.empty() ? "." : dir)].push_back(t);
      kept.push_back(t);
    }
    if (runs.size() > 1 && !merge) {
      std::cerr << "vramtrace report: these traces come from " << runs.size()
                << " different runs:";
      for (const auto& [id, list] : runs)
        std::cerr << " " << report::printable(fs::path(list.front()).parent_path().string())
                  << (id.empty() ? " (no run marker: LD_PRELOAD traces)" : "")
                  << (list.size() > 1 ? " (" + std::to_string(list.size()) + " traces)" : "")
                  << ";";
      std::cerr << " use --merge to report them together\n";
      return 2;
    }
    if (report_out.empty()) {
      report_out = new_numbered_dir("report");
      if (report_out.empty()) return 2;
    } else if (!prepare_output_dir(report_out, force, false, "vramtrace report")) {
      return 2;
    }
    return write_reports(kept, report_out, {}, nullptr, no_progress);
  }
  return 2;
}

// The launcher of `vramtrace run`: prepare, spawn, wait, exit (cli/launcher.h).
#include "cli/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/python_hook.h"
#include "cli/snapshot.h"
#include "collector/ingest/live_collector.h"
#include "collector/ingest/run_files.h"
#include "common/env_names.h"
#include "report/check.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {
namespace {

// The command's process group while it runs: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the
// launcher are passed on to it.
volatile sig_atomic_t g_child_group = 0;
// While the command is being started (from before the fork until its group is known), a
// signal is kept here and passed on once the group is known. The spawning thread blocks these
// signals, but the launcher's other threads (the live collector's) do not: one that came in
// that window ran the handler there, found no group yet and was lost, and the command never
// got it (a hang seen one run in many on a loaded machine).
volatile sig_atomic_t g_spawning = 0;
std::atomic<int> g_pending_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler's exchange must not lock");
// One of them came once the command had ended (nothing left to pass it on to).
volatile sig_atomic_t g_signalled_after = 0;

void forward_signal(int sig) {
  if (g_child_group > 0) {
    kill(-static_cast<pid_t>(g_child_group), sig);
  } else if (g_spawning) {
    g_pending_signal.store(sig);
    // The group may have become known since it was read: whichever of this handler and the
    // spawning thread takes the signal back passes it on, once.
    if (g_child_group > 0)
      if (int s = g_pending_signal.exchange(0)) kill(-static_cast<pid_t>(g_child_group), s);
  } else {
    g_signalled_after = 1;
  }
}

// The user's core-file limit. vramtrace itself runs with none (when the command crashes and
// vramtrace ends itself with the same signal, the core that is left is the command's, never
// vramtrace's); the command gets the user's limit back.
struct rlimit g_core_limit {
  RLIM_INFINITY, RLIM_INFINITY
};

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string find_library(const std::string& given) {
  if (!given.empty()) return fs::absolute(given).string();
  const char* env = getenv(env::kLib);
  if (env && *env) return fs::absolute(env).string();
  for (const char* rel :
       {"/../lib/libvramtrace.so", "/../lib/vramtrace/libvramtrace.so", "/libvramtrace.so"}) {
    fs::path p = fs::path(self_dir() + rel).lexically_normal();
    if (fs::exists(p)) return p.string();
  }
  return {};
}

// Writes the Python start-up hook into a new private folder of its own in the temporary
// directory and returns that folder ("" when it cannot). Never in the output folder: a
// sitecustomize.py or a .python there may be the user's.
std::string write_torch_hook() {
  std::error_code ec;
  std::string dir = (fs::temp_directory_path(ec) / "vramtrace-hook-XXXXXX").string();
  if (ec || !mkdtemp(dir.data())) {  // mode 0700
    std::cerr << "vramtrace run: cannot create a folder for the Python start-up hook in "
              << report::printable(dir) << ": " << std::strerror(errno) << "\n";
    return {};
  }
  for (int i = 0; i < kPythonHookFileCount; ++i) {
    if (!write_private_file(dir + "/" + kPythonHookFiles[i].name, kPythonHookFiles[i].content)) {
      fs::remove_all(dir, ec);
      return {};
    }
  }
  return dir;
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

}  // namespace

void no_core_for_vramtrace() {
  if (getrlimit(RLIMIT_CORE, &g_core_limit) != 0) return;
  struct rlimit none {
    0, g_core_limit.rlim_max
  };
  setrlimit(RLIMIT_CORE, &none);
  // A report larger than RLIMIT_FSIZE is a failed write (EFBIG, reported), not a death by
  // SIGXFSZ with a truncated file.
  signal(SIGXFSZ, SIG_IGN);
}

Launch::Launch(LaunchOptions options, std::vector<std::string> cmd)
    : options_(std::move(options)), cmd_(std::move(cmd)) {}

Launch::~Launch() {
  if (out_dir_fd_ >= 0) close(out_dir_fd_);
  // The hook's folder (and the bytecode Python cached there) is the run's only.
  std::error_code ec;
  if (!hook_dir_.empty()) fs::remove_all(hook_dir_, ec);
}

int Launch::prepare() {
  lib_ = find_library(options_.lib);
  if (lib_.empty() || !fs::exists(lib_)) {
    std::cerr << "vramtrace run: cannot find libvramtrace.so (use --lib or VRAMTRACE_LIB)\n";
    return kExitUsage;
  }
  std::error_code ec;
  made_out_dir_ = options_.out_dir.empty() || !fs::exists(options_.out_dir, ec);
  if (options_.out_dir.empty()) {
    options_.out_dir = new_numbered_dir("run");
    if (options_.out_dir.empty()) return kExitUsage;
  } else if (!prepare_output_dir(options_.out_dir, options_.force, true, "vramtrace run")) {
    return kExitUsage;
  }
  run_id_ = new_run_id();
  {
    // The marker names this process (`vramtrace snapshot` signals it): SIGUSR2 is caught first.
    catch_snapshot_signal();
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    out_dir_fd_ = open(options_.out_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    marker_ = {{"run_id", run_id_}, {"host", host}, {"pid", getpid()}, {"command", cmd_}};
    marker_.update(launcher_identity());
    if (!write_private_file(
            options_.out_dir + "/" + kRunMarker,
            marker_.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"))
      return kExitWriteFailed;
  }

  if (options_.stacks.torch != "off") hook_dir_ = write_torch_hook();

  try {
    live_ = std::make_unique<collector::LiveCollector>(options_.out_dir);
  } catch (const std::exception& e) {
    std::cerr << "vramtrace run: " << report::printable(e.what()) << "\n";
    return kExitUsage;
  }
  return 0;
}

int Launch::spawn() {
  // The command runs in a process group of its own. Signals sent to the launcher are passed
  // on to that group; a terminal's ^C reaches it directly when it holds the terminal (below).
  struct sigaction fwd {
  }, old_int{}, old_quit{}, old_term{}, old_hup{};
  fwd.sa_handler = forward_signal;
  sigemptyset(&fwd.sa_mask);
  fwd.sa_flags = SA_RESTART;
  // Blocked until the group exists, so that a signal that comes before it is passed on too.
  sigset_t fwd_set, old_mask;
  sigemptyset(&fwd_set);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) sigaddset(&fwd_set, sig);
  sigprocmask(SIG_BLOCK, &fwd_set, &old_mask);
  g_spawning = 1;
  sigaction(SIGINT, &fwd, &old_int);
  sigaction(SIGQUIT, &fwd, &old_quit);
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);

  // Tells the launcher whether the command could be started at all: closed by a successful
  // exec, or given execvp's errno.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) exec_pipe[0] = exec_pipe[1] = -1;
  pid_t child = fork();
  if (child < 0) {
    std::cerr << "vramtrace run: fork: " << std::strerror(errno) << "\n";
    g_spawning = 0;
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return kExitUsage;
  }
  if (child == 0) {
    setpgid(0, 0);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    signal(SIGXFSZ, SIG_DFL);
    signal(SIGUSR2, SIG_DFL);  // the launcher's snapshots, never the command's
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    setrlimit(RLIMIT_CORE, &g_core_limit);  // the command's own core files, as without vramtrace
    const char* pre = getenv("LD_PRELOAD");
    std::string preload = lib_ + (pre && *pre ? std::string(" ") + pre : std::string());
#ifdef VRAMTRACE_SANITIZER_PRELOAD
    // Sanitizer builds (cmake/Sanitize.cmake): the runtime must be loaded first; the leaks of
    // an unsanitized target are not ours to report, and its SIGSEGV stays its own.
    preload = std::string(VRAMTRACE_SANITIZER_PRELOAD) + " " + preload;
    for (const char* var : {"ASAN_OPTIONS", "TSAN_OPTIONS"}) {
      const char* old = getenv(var);
      setenv(var, (std::string(old ? old : "") + ":detect_leaks=0:handle_segv=0").c_str(), 1);
    }
#endif
    const StackOptions& stacks = options_.stacks;
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("CUDA_INJECTION64_PATH", lib_.c_str(), 1);
    setenv(env::kSocket, live_->socket_path().c_str(), 1);
    unsetenv(env::kOutput);
    setenv(env::kRunId, run_id_.c_str(), 1);  // recorded in each trace, as in the marker
    if (!stacks.mode.empty()) setenv(env::kStacks, stacks.mode.c_str(), 1);
    if (stacks.max_depth > 0) setenv(env::kMaxDepth, std::to_string(stacks.max_depth).c_str(), 1);
    if (!stacks.launches.empty()) setenv(env::kLaunches, stacks.launches.c_str(), 1);
    if (!hook_dir_.empty()) {
      const char* py = getenv("PYTHONPATH");
      setenv("PYTHONPATH", (hook_dir_ + (py && *py ? ":" + std::string(py) : "")).c_str(), 1);
      setenv(env::kTorchDir, fs::absolute(options_.out_dir).c_str(), 1);
      setenv(env::kTorchLive, torch_request_path().c_str(), 1);
      if (stacks.torch == "stacks") setenv(env::kTorchStacks, "1", 1);
      if (stacks.torch == "sampled" || stacks.torch == "full")
        setenv(env::kTorchTrace, stacks.torch.c_str(), 1);
    }
    if (options_.plan)
      setenv(env::kPlan, "1", 1);
    else
      unsetenv(env::kPlan);
    if (options_.preflight && !hook_dir_.empty())
      setenv(env::kPreflight, hook_dir_.c_str(), 1);
    else
      unsetenv(env::kPreflight);
    std::vector<char*> argv;
    for (const auto& a : cmd_) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    if (exec_pipe[1] >= 0) {
      ssize_t ignored = write(exec_pipe[1], &err, sizeof err);
      (void)ignored;
    }
    std::string msg = "vramtrace run: cannot run '" + report::printable(cmd_[0]) +
                      "': " + std::strerror(err) + "\n";
    ssize_t ignored = write(2, msg.data(), msg.size());
    (void)ignored;
    _exit(err == ENOENT ? 127 : 126);
  }
  setpgid(child, child);  // also here: the child may not have run yet
  child_ = child;
  if (exec_pipe[1] >= 0) {
    close(exec_pipe[1]);
    int err = 0;
    ssize_t n;
    while ((n = read(exec_pipe[0], &err, sizeof err)) < 0 && errno == EINTR) {}
    if (n == static_cast<ssize_t>(sizeof err)) exec_errno_ = err;
    close(exec_pipe[0]);
  }
  g_child_group = child;
  g_spawning = 0;
  // A signal that came while it was being started, passed on now (once: see forward_signal).
  if (int s = g_pending_signal.exchange(0)) kill(-child, s);
  terminal_owner_ = give_terminal(child);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  return 0;
}

report::RunInfo Launch::wait(const std::function<void()>& command_ended) {
  int status = 0;
  while (waitpid(child_, &status, 0) < 0 && errno == EINTR) {}
  take_terminal_back(terminal_owner_);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    status_ = status;
    command_ended_ = true;
  }
  if (command_ended) command_ended();
  // From here `vramtrace snapshot` says the run has ended.
  marker_["ended"] = true;
  write_private_file(options_.out_dir + "/" + kRunMarker,
                     marker_.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");

  // Processes of the command that outlive it (daemons, workers left behind) are still sending:
  // wait for them, within --grace-ms, and say so. The streams of processes that ended with the
  // command are closed already, but the collector may not have seen it yet: it gets a moment
  // (part of the grace period) before any process is called still running.
  const int grace_ms = options_.grace_ms;
  int waited_ms = 0;
  for (; waited_ms < std::min(grace_ms, 200) && live_->open_connections() > 0; waited_ms += 5)
    usleep(5000);
  if (int still = live_->open_connections(); still > 0 && grace_ms > 0)
    std::cerr << "vramtrace: the command has ended; waiting up to " << grace_ms / 1000.0
              << " s (--grace-ms) for " << still << " process(es) still running\n";
  traces_ = live_->finish(grace_ms - waited_ms);
  std::vector<std::string> still_running = live_->still_open();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    still_running_ = still_running;
    live_.reset();
  }
  g_child_group = 0;  // after the wait: a signal meanwhile still reaches what is left of it
  if (!still_running.empty()) {
    std::string pids;
    for (size_t i = 0; i < still_running.size(); ++i)
      if (uint64_t pid = collector::pid_in_trace_name(still_running[i]))
        pids += (i ? ", " : "") + std::to_string(pid);
      else
        pids += i ? ", ?" : "?";
    std::cerr << "vramtrace: " << still_running.size() << " process(es) still running after "
              << grace_ms / 1000.0 << " s (pid " << pids
              << "): reported as still running, their memory then is not counted as leaked\n";
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.out_dir, ec))
    if (collector::is_side_channel(entry.path())) traces_.push_back(entry.path().string());

  report::RunInfo info;
  info.command = cmd_;
  info.still_running = still_running;
  if (WIFEXITED(status_)) info.exit_code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) info.signal = WTERMSIG(status_);
  return info;
}

report::RunInfo Launch::state_now() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  report::RunInfo info;
  info.command = cmd_;
  if (command_ended_ && WIFEXITED(status_)) info.exit_code = WEXITSTATUS(status_);
  if (command_ended_ && WIFSIGNALED(status_)) info.signal = WTERMSIG(status_);
  info.still_running = live_ ? live_->open_traces() : still_running_;
  return info;
}

void Launch::discard() {
  std::error_code ec;
  fs::remove(options_.out_dir + "/" + kRunMarker, ec);
  // A folder that vramtrace made for this run and that holds nothing else.
  if (!made_out_dir_ || !fs::is_empty(options_.out_dir, ec)) return;
  fs::remove(options_.out_dir, ec);
  // The default folders' root, when this run was all it held.
  const fs::path parent = fs::path(options_.out_dir).parent_path();
  if (parent == kDefaultOutputRoot && fs::is_empty(parent, ec)) fs::remove(parent, ec);
}

bool signalled_after_command() { return g_signalled_after != 0; }

int exit_as_command(int status, int written) {
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

}  // namespace vramtrace::cli

// The launcher of `vramtrace run`, in the order it runs:
//   prepare: the preload library, the output folder, the run marker, the Python hook, the
//            collector on its private socket;
//   spawn:   the command in a process group of its own, with the library in its environment;
//            SIGINT, SIGQUIT, SIGTERM and SIGHUP sent to vramtrace are passed on to that group;
//   wait:    for the command, then (within --grace-ms) for the streams of its processes that
//            outlive it; SIGUSR2 meanwhile is a snapshot (cli/snapshot.h), never passed on;
//   exit:    vramtrace ends as the command did (the same exit code, the same signal).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "report/json_report.h"

namespace vramtrace::collector {
class LiveCollector;
}

namespace vramtrace::cli {

// What `run` asks the library to record: at each allocation (VRAMTRACE_STACKS, _MAX_DEPTH),
// PyTorch's allocator trace, and kernel launches (VRAMTRACE_LAUNCHES).
struct StackOptions {
  std::string mode;   // auto|none|native|python|all; empty: the library's default (auto)
  int max_depth = 0;  // 0: the library's default (64)
  // auto: PyTorch's allocator trace when the program imports torch; stacks: with the Python
  // frames of each block (costs what PyTorch's own recorder costs); off.
  std::string torch = "auto";
  // on|off (VRAMTRACE_LAUNCHES); empty: the library's default (on). off: the launch callbacks
  // are not enabled, for launch-bound jobs.
  std::string launches;
};

struct LaunchOptions {
  std::string out_dir;  // empty: a new vramtrace-out/run-N
  bool force = false;
  std::string lib;  // empty: VRAMTRACE_LIB, or next to this program
  int grace_ms = 5000;
  StackOptions stacks;
  // `vramtrace plan`: the hook stops each PyTorch process before its first training step, once
  // the step is predicted (VRAMTRACE_PLAN).
  bool plan = false;
  // `run --preflight`: the hook predicts each PyTorch process's first training step before it
  // runs and asks the launcher for its verdict (VRAMTRACE_PREFLIGHT: cli/preflight.h).
  bool preflight = false;
};

class Launch {
 public:
  Launch(LaunchOptions options, std::vector<std::string> cmd);
  ~Launch();

  // Each step returns 0, or the exit code of vramtrace when it cannot go on (2, or 74 when the
  // run marker cannot be written); nothing of the command has run then.
  int prepare();
  int spawn();
  // Until the command has ended and its streams are in (or the grace period is over). Returns
  // how the command ended and which of its processes were still running. `command_ended` is
  // called as soon as the command has ended, before the run marker says so (snapshots stop
  // there: cli/snapshot.h).
  report::RunInfo wait(const std::function<void()>& command_ended = {});

  // How the run stands now (thread-safe, from spawn() to the end): the command, how it ended
  // once it has, the traces of the processes connected now. What a report of this moment is
  // made with (cli/live_report.h).
  report::RunInfo state_now() const;

  const std::string& out_dir() const { return options_.out_dir; }
  // The file whose touch asks the command's PyTorch processes for their allocator trace of the
  // moment (a report of a running job; "" without the start-up hook). In the hook's own
  // private folder, gone with it.
  std::string torch_request_path() const {
    return hook_dir_.empty() ? std::string() : hook_dir_ + "/torch-request";
  }
  // Where the hook asks for pre-flight verdicts ("" without --preflight or the hook).
  std::string preflight_folder() const { return options_.preflight ? hook_dir_ : std::string(); }
  // After wait(): the trace files of the run, PyTorch's allocator traces included.
  const std::vector<std::string>& traces() const { return traces_; }
  // After wait(): the command's status, as from waitpid.
  int status() const { return status_; }
  // After spawn(): execvp's errno when the command could not be started at all, else 0.
  int exec_errno() const { return exec_errno_; }
  // For a command that never started: removes what prepare() wrote (the run marker; the output
  // folder too when prepare() made it and it is empty), so that nothing is left of the run.
  void discard();

 private:
  LaunchOptions options_;
  std::vector<std::string> cmd_;
  std::string lib_, hook_dir_, run_id_;
  std::unique_ptr<collector::LiveCollector> live_;
  pid_t child_ = 0;
  pid_t terminal_owner_ = 0;
  int status_ = 0;
  int exec_errno_ = 0;
  bool made_out_dir_ = false;
  std::vector<std::string> traces_;
  nlohmann::json marker_;  // the run marker's content (written again, "ended", at the end)
  // The run folder, held open while the run lasts: how `vramtrace snapshot` knows that the pid
  // the marker names is this folder's launcher (cli/snapshot.cpp, launcher_serves).
  int out_dir_fd_ = -1;
  // What state_now() reads while wait() changes it.
  mutable std::mutex state_mutex_;
  bool command_ended_ = false;
  std::vector<std::string> still_running_;
};

// Ends vramtrace as the command ended (status as from waitpid): by the same signal, or with its
// exit code; a command that succeeded gives `written` (0, or why its report is missing).
int exit_as_command(int status, int written);

// Whether SIGINT, SIGTERM, SIGHUP or SIGQUIT came once the command had ended (^C while
// `--serve` waits for an open page to fetch the final report).
bool signalled_after_command();

// vramtrace itself dumps no core (the command's core, if any, stays the only one) and takes a
// report larger than RLIMIT_FSIZE as a failed write; the command gets the user's limits back.
void no_core_for_vramtrace();

}  // namespace vramtrace::cli

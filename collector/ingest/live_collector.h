// The live side of the collector: a Unix socket that every traced process of a tree connects to.
//
// Each connection's stream is written as it arrives to OUTDIR/vramtrace.<pid>.vtrace (the pid
// comes from the peer's credentials; a second stream of one pid, after an exec, goes to
// vramtrace.<pid>-2.vtrace, never over the first), so everything that left a process is on disk
// even when that process, or the launcher, dies a moment later. What a process recorded but had not
// sent when it died (abort, _exit, SIGKILL: its stream ends without its last frames) is read from
// the event buffers it shares with the collector (common/shared_buffers.h; the memfd comes with the
// stream's first bytes) once its stream has ended, and appended to its trace as whole frames.
// The socket lives in a private directory (mode 0700) made for this run; trace files are
// created mode 0600.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace vramtrace::collector {

class LiveCollector {
 public:
  // Creates the private socket directory and starts listening. Throws std::runtime_error.
  explicit LiveCollector(std::string out_dir);
  ~LiveCollector();

  const std::string& socket_path() const { return socket_path_; }

  // Stops accepting once every open connection has closed, or when `grace_ms` have passed
  // since this call; then returns the trace files written (empty ones are removed).
  std::vector<std::string> finish(int grace_ms);

  int connections_seen() const { return connections_.load(); }
  // Connections open now: processes of the tree still running.
  int open_connections() const { return open_.load(); }
  // The traces of the processes connected now (thread-safe): what a report of this moment
  // reports as still running.
  std::vector<std::string> open_traces() const;
  // After finish(): the traces of the processes still connected when it stopped waiting
  // (processes that outlived the command and the grace period).
  const std::vector<std::string>& still_open() const { return still_open_; }

 private:
  void serve();

  std::string out_dir_, socket_dir_, socket_path_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> finishing_{false};
  std::atomic<int> open_{0};
  std::atomic<int> connections_{0};
  std::atomic<long long> deadline_ms_{0};
  std::vector<std::string> files_;
  std::vector<std::string> still_open_;
  mutable std::mutex open_mutex_;
  std::set<std::string> open_paths_;
};

}  // namespace vramtrace::collector

// Snapshots of a running run: SIGUSR2 sent to the launcher of `vramtrace run` (by
// `vramtrace snapshot RUN_DIR`, or by hand with kill) writes RUN_DIR/snapshot-N/report.json and
// report.html of that moment (cli/live_report.h) while the command runs on. N is the next free
// number; a snapshot never replaces a file, and the run's final report is the same as without.
//
// The run marker (RUN_DIR/vramtrace.run) names the launcher: its pid, its start time (clock
// ticks since boot, /proc/PID/stat) and the boot, so that a pid used again by another process is
// never signalled; and says "ended" once the command has ended.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace vramtrace::cli {

class LiveReport;

// Catches SIGUSR2 from now on (a byte into a pipe that SnapshotTaker reads): called before the
// run marker names this process, so that a snapshot asked at once does not kill it.
void catch_snapshot_signal();

// What the run marker says of this process, to find it again: launcher_start_ticks, boot_id.
nlohmann::json launcher_identity();

// While it lives, each SIGUSR2 writes a snapshot of `live` into `run_dir` (several sent while one
// is written: one more after it). Its thread runs below the job's priority.
class SnapshotTaker {
 public:
  SnapshotTaker(std::string run_dir, LiveReport& live);
  ~SnapshotTaker();  // stops: SIGUSR2 is caught and ignored from then on
  SnapshotTaker(const SnapshotTaker&) = delete;
  SnapshotTaker& operator=(const SnapshotTaker&) = delete;

 private:
  void run();
  std::string run_dir_;
  LiveReport& live_;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
};

// The start time of process `pid` in clock ticks since boot (/proc/PID/stat), 0 when unknown.
unsigned long long process_start_ticks(pid_t pid);

}  // namespace vramtrace::cli

// Snapshots of a running run (cli/snapshot.h): the launcher's side (SIGUSR2, SnapshotTaker) and
// `vramtrace snapshot RUN_DIR`, which asks for one and waits for it.
#include "cli/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/live_report.h"
#include "report/check.h"
#include "report/html_report.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

using nlohmann::json;

namespace {

int g_snapshot_pipe[2] = {-1, -1};

void on_snapshot_signal(int) {
  const int saved = errno;
  if (g_snapshot_pipe[1] >= 0) {
    const char c = 1;
    ssize_t ignored = write(g_snapshot_pipe[1], &c, 1);  // full: a snapshot is asked already
    (void)ignored;
  }
  errno = saved;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

constexpr const char* kSnapshotPrefix = "snapshot-";
// The last number: 9 digits, the most snapshot_number() reads, so that no snapshot is ever
// named past what the command lists.
constexpr unsigned long kLastSnapshot = 999999999;

// N of a name snapshot-N as the launcher writes it (N from 1 to kLastSnapshot, no leading
// zero), 0 for any other name.
unsigned long snapshot_number(const std::string& name) {
  const std::string prefix = kSnapshotPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 9 || name[prefix.size()] == '0')
    return 0;
  unsigned long n = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + static_cast<unsigned long>(name[i] - '0');
  }
  return n;
}

// N of a snapshot's folder, 0 for anything else: another name, or a link, a file, whatever was
// put there under a snapshot's name (the launcher makes folders only, never links).
unsigned long snapshot_folder(const fs::directory_entry& e) {
  const unsigned long n = snapshot_number(e.path().filename().string());
  std::error_code ec;
  return n && e.symlink_status(ec).type() == fs::file_type::directory ? n : 0;
}

unsigned long highest_snapshot(const std::string& dir) {
  unsigned long highest = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    highest = std::max(highest, snapshot_folder(e));
  return highest;
}

// Writes DIR/snapshot-N (N the next free number) from the report of this moment.
void take_snapshot(const std::string& dir, LiveReport& live) {
  std::shared_ptr<const json> now;
  try {
    now = live.now(true);
  } catch (const std::exception& e) {
    std::cerr << "vramtrace: snapshot: the report of this moment failed: "
              << report::printable(e.what()) << "\n";
    return;
  }
  // The folder is made first (mode 0700, never one that exists), then its two files.
  std::string out;
  unsigned long n = highest_snapshot(dir) + 1;
  for (int tries = 0; tries < 1000 && n <= kLastSnapshot; ++tries, ++n) {
    const std::string d = dir + "/" + kSnapshotPrefix + std::to_string(n);
    if (mkdir(d.c_str(), 0700) == 0) {
      out = d;
      break;
    }
    if (errno != EEXIST) {
      std::cerr << "vramtrace: snapshot: cannot create " << report::printable(d) << ": "
                << std::strerror(errno) << "\n";
      return;
    }
  }
  if (out.empty()) {
    std::cerr << "vramtrace: snapshot: no snapshot number left in " << report::printable(dir)
              << " (the last is " << kSnapshotPrefix << kLastSnapshot << ")\n";
    return;
  }
  json j = *now;
  j["live"]["snapshot"] = n;
  // report.html last: a snapshot is whole once it is there (`vramtrace snapshot` waits for it).
  const bool ok =
      write_private_file(out + "/report.json",
                         j.dump(2, ' ', false, json::error_handler_t::replace) + "\n") &&
      write_private_file(out + "/report.html", report::to_html(j));
  if (!ok) {
    std::error_code ec;
    fs::remove(out + "/report.json", ec);
    fs::remove(out, ec);
    return;
  }
  std::cerr << "vramtrace: snapshot: " << report::printable(out) << "/report.html (and "
            << "report.json)\n";
}

}  // namespace

unsigned long long process_start_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // Fields after the command name (which may hold spaces and parentheses): state is field 3,
  // starttime field 22.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

void catch_snapshot_signal() {
  if (g_snapshot_pipe[0] < 0 && pipe2(g_snapshot_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    g_snapshot_pipe[0] = g_snapshot_pipe[1] = -1;
  struct sigaction sa {};
  sa.sa_handler = on_snapshot_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

json launcher_identity() {
  return {{"launcher_start_ticks", process_start_ticks(getpid())}, {"boot_id", boot_id()}};
}

SnapshotTaker::SnapshotTaker(std::string run_dir, LiveReport& live)
    : run_dir_(std::move(run_dir)), live_(live) {
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
  thread_ = std::thread([this] { run(); });
}

SnapshotTaker::~SnapshotTaker() {
  if (stop_pipe_[1] >= 0) {
    const char c = 1;
    ssize_t ignored = write(stop_pipe_[1], &c, 1);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : stop_pipe_)
    if (fd >= 0) close(fd);
}

void SnapshotTaker::run() {
  // SIGUSR2 comes to this thread, whatever the mask the launcher was started with (the
  // command keeps that mask); a snapshot is made below the job's priority.
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  if (g_snapshot_pipe[0] < 0) return;
  for (;;) {
    pollfd fds[2] = {{g_snapshot_pipe[0], POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, stop_pipe_[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    char drain[64];
    while (read(g_snapshot_pipe[0], drain, sizeof drain) > 0) {}
    take_snapshot(run_dir_, live_);
  }
}

// ---- vramtrace snapshot RUN_DIR -----------------------------------------------------------------

namespace {

struct SnapshotArgs {
  std::string dir;
  double timeout_s = 60;
};

json read_marker(const std::string& dir, std::string* why) {
  std::ifstream in(dir + "/" + kRunMarker);
  if (!in) {
    *why = "missing";
    return nullptr;
  }
  try {
    json j = json::parse(in);
    if (j.is_object()) return j;
  } catch (const json::exception&) {}
  *why = "unreadable";
  return nullptr;
}

// Whether SIGUSR2 is caught by PID (/proc/PID/status, SigCgt): a launcher catches it before its
// run marker names it, and the signal would end a process that does not.
bool catches_snapshot_signal(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    try {
      return (std::stoull(line.substr(7), nullptr, 16) >> (SIGUSR2 - 1)) & 1;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

// Whether PID is a launcher of this vramtrace that holds DIR open (a launcher keeps its run
// folder open while the run lasts) and catches SIGUSR2: a run marker that names another
// process of the user, forged or left behind, never gets it signalled. Its executable must be
// this one (the same file, not a name: any program can be called vramtrace-something); when it
// is not, `why` says what it runs.
bool launcher_serves(pid_t pid, const std::string& dir, std::string* why) {
  std::error_code ec;
  const std::string proc = "/proc/" + std::to_string(pid);
  struct stat exe {
  }, self{};
  if (stat((proc + "/exe").c_str(), &exe) != 0 || stat("/proc/self/exe", &self) != 0) return false;
  if (exe.st_dev != self.st_dev || exe.st_ino != self.st_ino) {
    const fs::path path = fs::read_symlink(proc + "/exe", ec);
    const fs::path mine = fs::read_symlink("/proc/self/exe", ec);
    *why = "runs " + report::printable(path.string()) + ", not this vramtrace (" +
           report::printable(mine.string()) + ")";
    return false;
  }
  if (!catches_snapshot_signal(pid)) return false;
  struct stat want {};
  if (stat(dir.c_str(), &want) != 0) return false;
  for (const auto& e : fs::directory_iterator(proc + "/fd", ec)) {
    struct stat st {};
    if (stat(e.path().c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == want.st_dev &&
        st.st_ino == want.st_ino)
      return true;
  }
  return false;
}

int snapshot_command(const SnapshotArgs& a) {
  const char* who = "vramtrace snapshot";
  const std::string dir = a.dir;
  const std::string shown = report::printable(dir);
  auto fail = [&](const std::string& what) {
    std::cerr << who << ": " << what << "\n";
    return kExitUsage;
  };
  std::error_code ec;
  if (!fs::exists(dir, ec)) return fail(shown + ": no such folder");
  if (!fs::is_directory(dir, ec))
    return fail(shown +
                " is not a folder: give the folder of a running `vramtrace run` (its -o, or "
                "vramtrace-out/run-N)");
  std::string why;
  json marker = read_marker(dir, &why);
  if (marker.is_null()) {
    if (why == "missing")
      return fail(shown + " is not the folder of a `vramtrace run` (it has no " + kRunMarker +
                  "): give the folder of a running run");
    return fail(shown + "/" + kRunMarker + " cannot be read: not the folder of a running run");
  }
  const std::string report_html = shown + "/report.html";
  auto ended = [&](const json& m) { return m.value("ended", false) == true; };
  auto ended_message = [&] {
    return fs::exists(dir + "/report.html", ec)
               ? "the run in " + shown + " has ended: its report is " + report_html
               : "the run in " + shown + " has ended: no snapshot of it can be taken";
  };
  if (!marker.contains("run_id"))  // `vramtrace report`'s: the list of the files it wrote
    return fail(shown +
                " holds the reports of `vramtrace report`, not a run: give the folder of "
                "a running `vramtrace run`");
  if (ended(marker)) return fail(ended_message());
  if (!marker.contains("pid") || !marker["pid"].is_number_integer() ||
      !marker.contains("launcher_start_ticks"))
    return fail("the run in " + shown +
                " was started by a vramtrace that takes no snapshots (its " + kRunMarker +
                " does not name its launcher)");
  const pid_t pid = marker["pid"].get<pid_t>();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (marker.value("host", std::string()) != host)
    return fail("the run in " + shown + " runs on host " +
                report::printable(marker.value("host", std::string("?"))) +
                ", not on this one: take its snapshot there");
  const auto started = marker.value("launcher_start_ticks", 0ull);
  auto launcher_alive = [&] {
    return marker.value("boot_id", std::string()) == boot_id() && started != 0 &&
           process_start_ticks(pid) == started;
  };
  auto gone_message = [&] {
    return "the launcher of the run in " + shown + " (pid " + std::to_string(pid) +
           ") is no longer running: the run was cut off, and nothing is left to take a snapshot "
           "of (`vramtrace report " +
           shown + "` reports the traces it left)";
  };
  if (!launcher_alive()) return fail(gone_message());
  std::string other;
  if (!launcher_serves(pid, dir, &other))
    return fail("pid " + std::to_string(pid) + ", which " + shown + "/" + kRunMarker + " names, " +
                (other.empty() ? "is not the vramtrace launcher of this folder" : other) +
                ": not signalled");

  const unsigned long before = highest_snapshot(dir);
  if (before >= kLastSnapshot)
    return fail(shown + " holds " + kSnapshotPrefix + std::to_string(kLastSnapshot) +
                ", the last snapshot's number: move the snapshots elsewhere to take more");
  if (kill(pid, SIGUSR2) != 0)
    return fail(errno == ESRCH ? gone_message()
                               : "cannot signal the launcher of the run in " + shown + " (pid " +
                                     std::to_string(pid) + "): " + std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(a.timeout_s * 1000));
  for (;;) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const unsigned long n = snapshot_folder(e);
      if (n > before && fs::is_regular_file(fs::symlink_status(e.path() / "report.html", ec))) {
        const std::string out = dir + "/" + kSnapshotPrefix + std::to_string(n);
        std::cout << out << "\n";
        std::cerr << "vramtrace: snapshot: " << report::printable(out) << "/report.html (and "
                  << "report.json)\n";
        return 0;
      }
    }
    json m = read_marker(dir, &why);
    if (m.is_object() && ended(m)) return fail(ended_message());
    if (!launcher_alive()) return fail(gone_message());
    if (std::chrono::steady_clock::now() >= deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", a.timeout_s);
      return fail("no snapshot came from the launcher of the run in " + shown + " (pid " +
                  std::to_string(pid) + ") within " + secs +
                  " s (--timeout): its messages, on its own stderr, say why");
    }
    usleep(50 * 1000);
  }
}

}  // namespace

Command add_snapshot_command(CLI::App& app) {
  auto args = std::make_shared<SnapshotArgs>();
  auto* cmd = app.add_subcommand(
      "snapshot",
      "Write RUN_DIR/snapshot-N/report.json and report.html of this moment of a running "
      "`vramtrace run`, which runs on (the same as sending its launcher SIGUSR2)");
  cmd->add_option("run_dir", args->dir,
                  "The folder of the running run (its -o, or "
                  "vramtrace-out/run-N)")
      ->required();
  cmd->add_option("--timeout", args->timeout_s,
                  "How long to wait for the snapshot, in seconds (a long job's takes longer)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // CLI::Range lets "nan" through (every comparison with it is false).
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x >= 0.1 && x <= 86400.0))
              return "Value " + v + " not in range [0.1 - 86400] (seconds)";
            return {};
          },
          "FLOAT in [0.1 - 86400]"));
  return {cmd, [args] { return snapshot_command(*args); }, {}};
}

}  // namespace vramtrace::cli

// The report of a moment of a running run (cli/live_report.h).
#include "cli/live_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/commands.h"
#include "collector/analysis/moment.h"
#include "collector/ingest/live_collector.h"
#include "collector/ingest/run_files.h"
#include "collector/model/live_model.h"
#include "collector/model/model.h"
#include "common/format.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

using nlohmann::json;

LiveReport::LiveReport(std::string run_dir, State state, std::string torch_request)
    : run_dir_(std::move(run_dir)),
      state_(std::move(state)),
      torch_request_(std::move(torch_request)) {}

LiveReport::~LiveReport() = default;

std::string LiveReport::signature(const report::RunInfo& info) {
  std::string s;
  for (const auto& [path, t] : traces_)
    s += path + '\t' + std::to_string(t.size) + '\t' + std::to_string(t.mtime_ns) + '\n';
  for (const auto& p : info.still_running) s += "open\t" + p + '\n';
  if (info.exit_code) s += "exit\t" + std::to_string(*info.exit_code) + '\n';
  if (info.signal) s += "signal\t" + std::to_string(*info.signal) + '\n';
  return s;
}

namespace {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Whether process `pid` runs PyTorch's Python module (the start-up hook answers there).
bool runs_torch(uint64_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libtorch_python") != std::string::npos) return true;
  return false;
}

// Whether process `pid` is a Python interpreter (which may have imported a PyTorch that maps
// no libtorch_python, as the tests' stand-in does).
bool runs_python(uint64_t pid) {
  std::error_code ec;
  const std::string exe =
      fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).filename().string();
  return !ec && exe.rfind("python", 0) == 0;
}

}  // namespace

void LiveReport::ask_torch(const report::RunInfo& info, bool wait) {
  const int fd = open(torch_request_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;  // the hook's folder is gone: the run is ending
  futimens(fd, nullptr);
  close(fd);
  torch_asked_ns_ = monotonic_ns();
  const int64_t asked = mtime_ns(torch_request_);
  if (!wait || asked < 0) return;
  // PyTorch's processes answer within 20 s (the hook looks every 0.25 s, then writes); other
  // Python processes may have imported a PyTorch too: a second for them.
  std::vector<std::string> torch, python;
  for (const auto& trace : info.still_running)
    if (const uint64_t pid = collector::pid_in_trace_name(trace)) {
      const std::string answer = run_dir_ + "/vramtrace." + std::to_string(pid) + ".torch";
      if (runs_torch(pid))
        torch.push_back(answer);
      else if (runs_python(pid))
        python.push_back(answer);
    }
  auto answered = [asked](const std::vector<std::string>& files) {
    return std::all_of(files.begin(), files.end(),
                       [asked](const std::string& f) { return mtime_ns(f) >= asked; });
  };
  for (int waited_ms = 0; waited_ms < 20000; waited_ms += 50) {
    if (answered(torch) && (waited_ms >= 1000 || answered(python))) return;
    usleep(50 * 1000);
  }
}

std::shared_ptr<const json> LiveReport::now(bool exact) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || (held_ && last_)) return last_;
  const report::RunInfo info = state_();
  if (!torch_request_.empty() &&
      (exact || torch_asked_ns_ == 0 || monotonic_ns() - torch_asked_ns_ > 30'000'000'000LL))
    ask_torch(info, exact);

  // The traces so far (the collector names them run_dir + "/vramtrace.<pid>.vtrace": the same
  // spelling here, so that RunInfo::still_running finds them).
  std::map<std::string, TraceState> seen;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir_, ec)) {
    if (!collector::is_run_file(entry.path())) continue;
    const std::string path = run_dir_ + "/" + entry.path().filename().string();
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    TraceState t;
    auto old = traces_.find(path);
    if (old != traces_.end()) t = old->second;
    t.size = static_cast<uint64_t>(st.st_size);
    t.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    seen[path] = t;
  }
  traces_ = std::move(seen);
  const std::string sig = signature(info);
  if (last_ && sig == last_signature_) return last_;

  std::vector<collector::LiveTrace> traces;
  std::vector<std::string> torch;
  for (auto& [path, t] : traces_) {
    if (collector::is_side_channel(path)) {
      torch.push_back(path);
      continue;
    }
    // A frame boundary found before is one still (the file only grows while it is written).
    t.whole = collector::whole_frames_end(path, t.whole <= t.size ? t.whole : 0);
    // Connected, but its first frame has not come whole yet: it appears at the next moment.
    if (t.whole == 0) continue;
    const bool open = std::find(info.still_running.begin(), info.still_running.end(), path) !=
                      info.still_running.end();
    traces.push_back({path, t.whole, open});
  }
  collector::Run run = model_.moment(traces, torch);
  const collector::MomentAnalysis moment = collector::moment_analysis_of(run, info.still_running);
  auto j = std::make_shared<json>(report::to_json(moment.analysis, info));
  (*j)["live"] = report::live_json(moment);
  last_ = std::move(j);
  last_signature_ = sig;
  return last_;
}

void LiveReport::hold() {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ = true;
}

void LiveReport::finish(const json& final_report) {
  auto j = std::make_shared<json>(final_report);
  (*j)["live"] = {{"running", false}};
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = std::move(j);
  finished_ = true;
}

}  // namespace vramtrace::cli

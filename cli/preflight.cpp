// `vramtrace run --preflight`'s desk (cli/preflight.h): asks read, verdicts said.
#include "cli/preflight.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "collector/ingest/run_files.h"
#include "collector/model/live_model.h"
#include "collector/model/model.h"
#include "collector/predict/preflight.h"
#include "common/env_names.h"
#include "common/printable.h"
#include "interpose/options.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

namespace {

uint64_t preflight_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// "preflight.<pid>.ask" -> pid, 0 for any other name.
uint64_t asking_pid(const std::string& name) {
  const std::string head = "preflight.", tail = ".ask";
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return 0;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 19 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return std::strtoull(digits.c_str(), nullptr, 10);
}

}  // namespace

PreflightDesk::PreflightDesk(std::string folder, std::string run_dir)
    : folder_(std::move(folder)), run_dir_(std::move(run_dir)) {
  thread_ = std::thread([this] { run(); });
}

PreflightDesk::~PreflightDesk() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PreflightDesk::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    struct Ask {
      uint64_t pid, step_ns;  // when its step began
      int stage;
    };
    std::vector<Ask> asks;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder_, ec)) {
      const uint64_t pid = asking_pid(entry.path().filename().string());
      if (!pid) continue;
      std::ifstream in(entry.path());
      uint64_t step_ns = 0;
      int stage = 1;
      if (!(in >> step_ns)) continue;  // moved in whole by the hook (rename)
      if (!(in >> stage) || stage != 2) stage = 1;
      if (answered_.count({pid, stage})) continue;
      asks.push_back({pid, step_ns, stage});
    }
    for (const Ask& a : asks) {
      answered_.insert({a.pid, a.stage});
      lock.unlock();
      answer(a.pid, a.step_ns, a.stage);
      lock.lock();
    }
    wake_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void PreflightDesk::answer(uint64_t pid, uint64_t step_ns, int stage) {
  // What the library recorded before the step began reaches its trace within its flush period:
  // the writer sends its buffer at least that often (interpose/recorder.cpp).
  const uint64_t flush = interpose::flush_interval_ns(std::getenv(env::kFlushMs));
  const uint64_t ready = step_ns + std::min<uint64_t>(flush, 20'000'000'000ull) + 50'000'000;
  for (uint64_t now = preflight_clock_ns(); now < ready; now = preflight_clock_ns())
    usleep(static_cast<useconds_t>(std::min<uint64_t>(ready - now, 50'000'000) / 1000));

  std::vector<collector::LiveTrace> traces;
  std::vector<std::string> side;
  // On a loaded machine the collector may write the process's first frames later than the
  // library sent them: looked for again for a while (the hook waits longer for the answer).
  const uint64_t give_up = preflight_clock_ns() + 10'000'000'000ull;
  for (;;) {
    traces.clear();
    side.clear();
    for (const std::string& path : collector::run_inputs({run_dir_}).files) {
      if (collector::is_side_channel(path)) {
        if (fs::path(path).filename() == "vramtrace." + std::to_string(pid) + ".torch")
          side.push_back(path);
        continue;
      }
      if (collector::pid_in_trace_name(path) != pid) continue;
      if (const uint64_t end = collector::whole_frames_end(path))
        traces.push_back({path, end, true});
    }
    if ((!traces.empty() && !side.empty()) || preflight_clock_ns() >= give_up) break;
    usleep(100'000);
  }
  std::string verdict;
  bool more = false;
  if (traces.empty() || side.empty()) {
    verdict = "vramtrace: PRE-FLIGHT: process " + std::to_string(pid) +
              ": no trace of it yet: no verdict\n";
  } else {
    collector::LiveModel model;
    const collector::Run run = model.moment(traces, side);
    const auto p = std::find_if(run.processes.begin(), run.processes.end(),
                                [pid](const collector::ProcessModel& m) { return m.pid == pid; });
    verdict = p == run.processes.end()
                  ? "vramtrace: PRE-FLIGHT: process " + std::to_string(pid) +
                        ": not in its trace yet: no verdict\n"
                  : collector::preflight_verdict(*p, stage == 1 ? &more : nullptr);
  }
  std::cerr << printable_lines(verdict) << std::flush;
  // The answer: "more" when the hook is to predict the rest and ask again; written whole before
  // the hook can see the file (a temporary name, then renamed).
  const std::string done = folder_ + "/preflight." + std::to_string(pid) + ".done";
  const std::string part = done + ".part";
  const int fd = open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    const std::string text = more ? "more\n" : "";
    bool whole = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    whole = close(fd) == 0 && whole;
    if (whole)
      std::rename(part.c_str(), done.c_str());
    else
      unlink(part.c_str());
  }
}

}  // namespace vramtrace::cli

// The analysis of a moment of a running job (`run --serve`, `snapshot`, SIGUSR2:
// cli/live_report.h), decided here and written by report/: the run's analysis as of now, with its
// OOMs read as a running job's, and what is live now on each device (the page's "now"), every
// process's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/live_set.h"
#include "collector/model/model.h"

namespace vramtrace::collector {

// What one process holds of a device now.
struct LiveShare {
  uint64_t pid = 0, bytes = 0, count = 0;
};

// What is live now on one device of one host, by site and library, and each process's share.
struct LiveDevice {
  std::string host;
  uint32_t device = 0;
  uint64_t bytes = 0;
  uint64_t count = 0;
  LiveSet live;
  std::vector<LiveShare> by_process;  // by pid
};

struct MomentAnalysis {
  RunAnalysis analysis;
  std::vector<LiveDevice> now;  // by host, then device
  // Before its first CUDA work a job has no device in its report: `note` says so.
  bool cuda_used = false;
  std::string note;
};

// The moment's analysis of `run` (LiveModel::moment()), whose processes with a trace in
// `still_running` are still running: their OOMs are marked not fatal in `run` first, since a
// process still running has not died of them (the model takes a process without its exit for
// one that died; which OOM ends it, if any, is known only when it ends). `run` must outlive
// the result, which refers to it.
MomentAnalysis moment_analysis_of(Run& run, const std::vector<std::string>& still_running);

}  // namespace vramtrace::collector

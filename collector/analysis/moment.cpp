// The analysis of a moment of a running job (see moment.h).
#include "collector/analysis/moment.h"

#include <algorithm>
#include <map>
#include <utility>

#include "collector/analysis/stacks.h"

namespace vramtrace::collector {

namespace {

// What is live now on each device, every process's: by site and library, each process's share.
std::vector<LiveDevice> live_now(const Run& run, const RunAnalysis& analysis) {
  struct Device {
    std::vector<Allocation> live;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> by_pid;  // pid -> bytes, count
    uint64_t bytes = 0;
  };
  std::map<std::pair<std::string, uint32_t>, Device> devices;
  for (size_t i = 0; i < run.processes.size(); ++i) {
    const auto& p = run.processes[i];
    for (const auto& [key, a] : p.live) {
      if (a.space != 0) continue;  // a pool's blocks are inside its driver allocations
      Device& d = devices[{p.host, a.device}];
      d.live.push_back(a);
      d.live.back().process = static_cast<uint32_t>(i);
      d.bytes += a.bytes;
      auto& [bytes, count] = d.by_pid[p.pid];
      bytes += a.bytes;
      ++count;
    }
  }
  const StacksOf stacks_of = [&analysis](const Allocation& a) -> StackResolver& {
    return *analysis.stacks[a.process];
  };
  std::vector<LiveDevice> out;
  for (auto& [key, d] : devices) {
    std::stable_sort(d.live.begin(), d.live.end(),
                     [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
    LiveDevice e;
    e.host = key.first;
    e.device = key.second;
    e.bytes = d.bytes;
    e.count = d.live.size();
    e.live = live_set(d.live, stacks_of, 0, false);
    for (const auto& [pid, figures] : d.by_pid)
      e.by_process.push_back({pid, figures.first, figures.second});
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

MomentAnalysis moment_analysis_of(Run& run, const std::vector<std::string>& still_running) {
  for (auto& p : run.processes)
    if (std::find(still_running.begin(), still_running.end(), p.trace_path) != still_running.end())
      for (auto& o : p.ooms) o.fatal = false;
  MomentAnalysis m{analysis_of(run, still_running), {}, false, {}};
  m.now = live_now(run, m.analysis);
  m.cuda_used = !m.analysis.devices.empty();
  if (!m.cuda_used)
    m.note =
        "the job has not used CUDA yet: no process of it has created a CUDA "
        "context or allocated device memory so far";
  return m;
}

}  // namespace vramtrace::collector

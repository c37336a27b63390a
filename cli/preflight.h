// `vramtrace run --preflight`'s launcher side: the desk where the start-up hook of each PyTorch
// process asks for the verdict of its first training step before that step runs. The hook, at
// the first training call, runs the step on fake tensors, writes its side channel
// (vramtrace.<pid>.torch, with a PF line) and drops preflight.<pid>.ask into the hook's private
// folder (VRAMTRACE_PREFLIGHT), holding when the step began; the desk, which looks every 50 ms,
// waits until the preloaded library's writer has flushed what it held from before that moment
// (its flush period, VRAMTRACE_FLUSH_MS, and a margin), reads that process's trace so far and its
// side channel as a report of the moment does (collector/model/live_model.h), prints the plan's
// verdict on stderr (collector/predict/preflight.h: fits with its headroom, or the need against
// the limit, the largest batch that fits and the remedies), and drops preflight.<pid>.done. The
// hook waits for it a bounded time (VRAMTRACE_PREFLIGHT_WAIT, 30 s), then the program goes on.
// Two stages: the hook first predicts the step at its batch alone (stage 1 of the ask); when it
// will not fit, the desk says so at once and answers "more" in the .done file, and the hook
// predicts the half batch and the remedies' changes and asks again (stage 2: the whole verdict).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace vramtrace::cli {

class PreflightDesk {
 public:
  // `folder`: where the asks come (the hook's private folder); `run_dir`: the run's traces.
  PreflightDesk(std::string folder, std::string run_dir);
  ~PreflightDesk();  // stops looking (an ask being answered is finished first)
  PreflightDesk(const PreflightDesk&) = delete;
  PreflightDesk& operator=(const PreflightDesk&) = delete;

 private:
  void run();
  void answer(uint64_t pid, uint64_t step_ns, int stage);
  std::string folder_, run_dir_;
  std::set<std::pair<uint64_t, int>> answered_;  // pid, stage
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vramtrace::cli

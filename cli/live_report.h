// The report of a moment of a running `vramtrace run`: what `--serve` serves (cli/serve.h) and
// what a snapshot writes (SIGUSR2, `vramtrace snapshot`). Every caller goes through this class,
// so that how the moment is computed can change without them.
//
// The report is report.json's contract (report/report.schema.json) with a "live" object:
// {"running": true, "now": [what is live now, per device, by site and by library]}; once the
// run has ended, the final report itself with {"running": false}. Reports of `run` and `report`
// never have it.
//
// How: the run folder's traces so far, each .vtrace up to the end of its last whole frame (the
// collector appends bytes as they arrive, so a frame may be half there: it is left for the next
// time, never reported as a cut trace), are kept as a model that reads on from one moment to
// the next (collector/model/live_model.h: only what arrived is read; a finished copy is analysed).
// PyTorch's and JAX's side traces (.torch, .jax) are written whole and renamed into place by the
// start-up hook, at exit, at an OOM, and when asked: touching the hook's request file
// (Launch::torch_request_path) makes each PyTorch process of the run write its allocator trace of
// the moment (its Python threads wait for the GIL meanwhile, so pages ask for it seldom; a snapshot
// asks and waits).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "collector/model/live_model.h"
#include "report/json_report.h"

namespace vramtrace::cli {

class LiveReport {
 public:
  // How the run stands when asked: its command, how it ended once it has, and the traces of
  // the processes connected now (RunInfo::still_running: reported as running, their memory
  // not counted as leaked). Called with the report's lock held.
  using State = std::function<report::RunInfo()>;

  // `torch_request`: the start-up hook's request file ("" without the hook: --torch=off).
  LiveReport(std::string run_dir, State state, std::string torch_request = "");
  ~LiveReport();
  LiveReport(const LiveReport&) = delete;
  LiveReport& operator=(const LiveReport&) = delete;

  // The report of this moment. Thread-safe. Made again only when the run's traces grew or its
  // state changed since the last call; otherwise the same object as then. PyTorch's view (its
  // categories, modules, blocks) is the last one its processes wrote, asked for again when it is
  // older than 30 s; `exact` (a snapshot): asked for now, and waited for (at most 20 s).
  std::shared_ptr<const nlohmann::json> now(bool exact = false);

  // The command has ended: now() gives the last report until finish() (the final report is
  // being made from the same traces; a second analysis beside it would only slow it down).
  // Waits for a report being made.
  void hold();

  // The run's final report, once written (report.json as `run` wrote it): now() gives it from
  // then on, with "live": {"running": false}.
  void finish(const nlohmann::json& final_report);

 private:
  struct TraceState {
    uint64_t size = 0, whole = 0;  // bytes in the file; end of its last whole frame
    int64_t mtime_ns = 0;
  };
  std::string signature(const report::RunInfo& info);
  // Asks the PyTorch processes still running for their allocator trace; with `wait`, returns
  // once each has written it (or after 20 s).
  void ask_torch(const report::RunInfo& info, bool wait);

  const std::string run_dir_;
  State state_;
  const std::string torch_request_;
  int64_t torch_asked_ns_ = 0;  // CLOCK_MONOTONIC of the last request, 0: never
  std::mutex mutex_;
  std::map<std::string, TraceState> traces_;  // by path
  collector::LiveModel model_;
  std::string last_signature_;
  std::shared_ptr<const nlohmann::json> last_;
  bool finished_ = false, held_ = false;
};

}  // namespace vramtrace::cli

// A run's model kept while the run goes on, for the report of a moment (cli/live_report.h): the
// builders of its processes (builder.h) stay alive between moments and are fed only what
// arrived since the last one, through the merge that model_of() uses (merge.h); each moment's
// Run is a copy of them, finished, so that the model that reads on is left as it was. A
// moment's Run is the one model_of() makes of the same traces read to the same ends.
//
// What a moment costs: the records that arrived since the last one, applied once; then a copy
// of the model (what the run holds now: live allocations, stacks, timelines, the launch rhythm;
// not what it did), the records the merge could not apply yet applied to the copy (those of
// other processes past the last record of a process still running, whose next record may come
// before them; while such a process sends nothing, what the others write meanwhile is applied
// to each moment's copy again), and the copy finished. The model starts over, reading every trace
// again, when the traces change in a way that cannot be read on: a process's trace appears or goes,
// a PyTorch or JAX side channel is rewritten (the start-up hook writes it whole when asked, at an
// OOM and at exit), a trace taken as ended grows, or a trace cannot be read on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/model/model.h"

namespace vramtrace::collector {

// A trace of a run still going on.
struct LiveTrace {
  std::string path;
  uint64_t end = 0;  // what is read of it: up to the end of its last whole frame
  bool open = true;  // its process may still write to it (false: it has ended)
};

class LiveModel {
 public:
  LiveModel();
  ~LiveModel();
  LiveModel(const LiveModel&) = delete;
  LiveModel& operator=(const LiveModel&) = delete;

  // The run of this moment, from `traces` (in the order model_of() would take them) and the
  // side channels' files. A trace that cannot be opened is a problem of the run (its
  // TraceError), after the others.
  Run moment(const std::vector<LiveTrace>& traces, const std::vector<std::string>& side_channels);

  // How the last moment was made: whether the model started over, the records it applied to
  // the model kept (what arrived, or everything when it started over) and to the copy alone.
  struct Cost {
    bool started_over = false;
    uint64_t applied = 0, applied_to_copy = 0;
  };
  const Cost& last_cost() const { return cost_; }

 private:
  struct State;
  bool read_on(const std::vector<LiveTrace>& traces, const std::vector<std::string>& side_channels,
               std::vector<std::string>& unreadable);
  void start_over(const std::vector<LiveTrace>& traces,
                  const std::vector<std::string>& side_channels,
                  std::vector<std::string>& unreadable);
  Run finished_copy();
  std::unique_ptr<State> state_;
  Cost cost_;
};

}  // namespace vramtrace::collector

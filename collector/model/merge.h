// The k-way merge by time of a run's sources into the builders of its processes (builder.h), so
// that the run-wide device totals see every process in order. Sources: the traces (one per
// process, source i feeds builder i), then PyTorch's traces, each fed to the builder of its
// process. Records without a time (strings, notices) take the time of the record before them in
// their source; equal times go in source order.
//
// The merge can stop and go on: collector/model/model_of.cpp runs it to the end of traces read
// whole; collector/model/live_model.h runs it while the traces grow, stopping where a source that
// may still grow has no record waiting (what comes next there may come first), and finishes a copy
// of it for the report of a moment. Either way the records reach the builders in the same order.
#pragma once

#include <functional>
#include <queue>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/builder.h"

namespace vramtrace::collector {

class Merge {
 public:
  // `readers[i]` feeds `builders[i]`; `torch`: PyTorch's traces (paired with their process by
  // pid at start()). All of them must outlive the merge.
  Merge(Run& run, std::vector<TraceReader*> readers, const std::vector<TorchTrace>& torch,
        std::vector<Builder>& builders);

  // A copy of `other` at the point it reached, feeding `builders` (copies of other's, in a copy
  // of its run) and reading on from `readers` (each other's reader's clone, or null where other's
  // source had nothing left). Other's waiting records view other's readers' frames: other's
  // readers must not move until this copy has run.
  Merge(const Merge& other, Run& run, std::vector<TraceReader*> readers,
        std::vector<Builder>& builders);

  // Takes each source's first record and pairs PyTorch's traces with their process (a trace
  // of a pid without a CUDA trace is a problem of the run). Once, before run().
  void start();

  // Applies the records in order until every source is spent, or until a source that `open`
  // says may still grow has none waiting: true when it stopped there. Without `open`, to the end.
  bool run(const std::function<bool(size_t reader)>& open = nullptr);

  // Reader `i`, which had nothing waiting, may have more now (its reader reads on).
  void pull_again(size_t i) {
    if (!waiting_[i]) pull(i);
  }
  bool waiting(size_t i) const { return waiting_[i]; }

  std::vector<size_t> torch_of;  // process -> its PyTorch trace (SIZE_MAX: none)

 private:
  struct Head {
    uint64_t time;
    size_t source;
    bool operator>(const Head& o) const {
      return time != o.time ? time > o.time : source > o.source;
    }
  };
  void pair_side_channel(size_t t);
  void pull(size_t i);

  Run* run_;
  std::vector<TraceReader*> readers_;
  const std::vector<TorchTrace>* torch_;
  std::vector<Builder>* builders_;
  std::vector<format::Record> pending_;
  std::vector<bool> waiting_;  // by source: its next record is in pending_/heads_
  std::vector<size_t> torch_pos_;
  std::vector<size_t> builder_of_;
  std::vector<uint64_t> last_time_;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads_;
};

// PyTorch's (and JAX's) traces of a run, read whole from `paths`; what is wrong with one is a
// problem of `run` (a file that is not one is left out).
std::vector<TorchTrace> read_side_channels(Run& run, const std::vector<std::string>& paths);

}  // namespace vramtrace::collector

// A run's model from its trace files, read to their end: the traces of its processes and their
// PyTorch side channels merged in time order into one builder per process (builder.h), then
// each process and the run finished (see model.h).
#include <algorithm>
#include <queue>

#include "collector/builder.h"
#include "collector/live_collector.h"
#include "collector/torch_trace.h"

namespace vramtrace::collector {

using format::RecordType;

void attach_torch_context(ProcessModel& p, TorchContext context) {
  if (context.present) {
    p.torch_memory = std::make_shared<const TorchMemory>(std::move(context));
    p.torch_context =
        std::shared_ptr<const TorchContext>(p.torch_memory, &p.torch_memory->context());
  } else {
    p.torch_context = std::make_shared<const TorchContext>(std::move(context));
  }
}

void finish_process(Run& run, ProcessModel& p, Builder& builder, const std::string& trace_name,
                    const std::string& stream_problem) {
  builder.finish();
  if (!stream_problem.empty()) {
    p.problem = stream_problem;
    run.problems.push_back(trace_name + ": " + p.problem);
  }
  if (!p.has_process_record) {
    run.problems.push_back(trace_name + ": no process record (empty stream)");
    // The launcher names each stream's file after the peer's pid (vramtrace.<pid>[-k].vtrace):
    // a process still running whose first frame had not arrived is still named.
    p.pid = pid_in_trace_name(trace_name);
  }
  for (auto& [index, d] : p.devices)
    if (d.name.find("stand-in") != std::string::npos) run.stand_in = true;
}

void finish_run(Run& run) {
  run.origin_ns = UINT64_MAX;
  for (auto& p : run.processes)
    if (p.has_process_record) run.origin_ns = std::min(run.origin_ns, p.start_ns);
  if (run.origin_ns == UINT64_MAX) run.origin_ns = 0;
  std::sort(run.devices.begin(), run.devices.end(), [](const RunDevice& a, const RunDevice& b) {
    return a.host != b.host ? a.host < b.host : a.index < b.index;
  });
  // Live at each device's peak: freed after it, or still live at the end, and made before it.
  std::map<std::pair<std::string, uint32_t>, RunDevice*> by_key;
  for (RunDevice& d : run.devices) {
    by_key[{d.host, d.index}] = &d;
    d.live_at_peak = std::move(d.freed_after_peak);
    d.freed_after_peak = {};
  }
  for (const ProcessModel& p : run.processes) {
    auto consider = [&](const Allocation& a) {
      auto it = by_key.find({p.host, a.device});
      if (it != by_key.end() && a.seq <= it->second->peak_seq && it->second->peak_bytes)
        it->second->live_at_peak.push_back(a);
    };
    for (const auto& [k, a] : p.live) consider(a);
    for (const auto& [k, h] : p.vmm_handles) consider(h.alloc);
  }
  for (RunDevice& d : run.devices)
    std::sort(d.live_at_peak.begin(), d.live_at_peak.end(),
              [](const Allocation& a, const Allocation& b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes : a.seq < b.seq;
              });
}

namespace {

// Whether a file is a start-up hook's side channel (.torch, .jax), not a trace.
bool is_side_channel(const std::string& path) {
  return (path.size() > 6 && path.compare(path.size() - 6, 6, ".torch") == 0) ||
         (path.size() > 4 && path.compare(path.size() - 4, 4, ".jax") == 0);
}

std::vector<TorchTrace> read_side_channels(Run& run, const std::vector<std::string>& paths) {
  std::vector<TorchTrace> torch;
  for (const auto& path : paths) {
    try {
      torch.push_back(read_torch_trace(path));
      if (!torch.back().problem.empty()) run.problems.push_back(path + ": " + torch.back().problem);
    } catch (const TraceError& e) {
      run.problems.push_back(e.what());
    }
  }
  return torch;
}

// The k-way merge by time of a run's sources, so that the run-wide device totals see every
// process in order. Records without a time (strings, notices) take the time of the record before
// them. Sources: the traces (one per process), then PyTorch's traces, each fed to the builder of
// its process.
class Merge {
 public:
  Merge(Run& run, std::vector<std::unique_ptr<TraceReader>>& readers,
        std::vector<TorchTrace>& torch, std::vector<Builder>& builders)
      : run_(run),
        readers_(readers),
        torch_(torch),
        builders_(builders),
        pending_(readers.size()),
        torch_pos_(torch.size(), 0),
        builder_of_(readers.size() + torch.size(), SIZE_MAX),
        last_time_(readers.size() + torch.size(), 0),
        torch_of(readers.size(), SIZE_MAX) {}

  void run() {
    if (torch_.empty() && readers_.size() == 1) {
      while (readers_[0]->next(pending_[0])) builders_[0].apply(pending_[0]);
      return;
    }
    for (size_t i = 0; i < readers_.size(); ++i) {
      builder_of_[i] = i;
      pull(i);
    }
    for (size_t t = 0; t < torch_.size(); ++t) pair_side_channel(t);
    while (!heads_.empty()) {
      const Head h = heads_.top();
      heads_.pop();
      if (h.source < readers_.size()) {
        builders_[builder_of_[h.source]].apply(pending_[h.source]);
      } else {
        const size_t t = h.source - readers_.size();
        const TorchEvent& e = torch_[t].events[torch_pos_[t]];
        builders_[builder_of_[h.source]].apply(e.record, true, e.stream);
        ++torch_pos_[t];
      }
      pull(h.source);
    }
  }

 private:
  struct Head {
    uint64_t time;
    size_t source;
    bool operator>(const Head& o) const {
      return time != o.time ? time > o.time : source > o.source;
    }
  };

  // A trace starts with its Process record: PyTorch's trace goes to the process of its pid.
  void pair_side_channel(size_t t) {
    const size_t source = readers_.size() + t;
    for (size_t i = 0; i < readers_.size(); ++i)
      if (pending_[i].type == RecordType::Process && pending_[i].process.pid == torch_[t].pid)
        builder_of_[source] = i;
    if (builder_of_[source] == SIZE_MAX) {
      run_.problems.push_back("PyTorch allocator trace of pid " + std::to_string(torch_[t].pid) +
                              " has no CUDA trace of that process: not merged");
      return;
    }
    ProcessModel& p = run_.processes[builder_of_[source]];
    p.torch_trace = true;
    p.torch_trace_problem = torch_[t].problem;
    torch_of[builder_of_[source]] = t;
    pull(source);
  }

  void pull(size_t i) {
    if (i < readers_.size()) {
      if (!readers_[i]->next(pending_[i])) return;
      if (pending_[i].time_ns) last_time_[i] = pending_[i].time_ns;
    } else {
      const size_t t = i - readers_.size();
      if (torch_pos_[t] >= torch_[t].events.size()) return;
      const uint64_t time = torch_[t].events[torch_pos_[t]].record.time_ns;
      if (time) last_time_[i] = time;
    }
    heads_.push({last_time_[i], i});
  }

  Run& run_;
  std::vector<std::unique_ptr<TraceReader>>& readers_;
  std::vector<TorchTrace>& torch_;
  std::vector<Builder>& builders_;
  std::vector<format::Record> pending_;
  std::vector<size_t> torch_pos_;
  std::vector<size_t> builder_of_;
  std::vector<uint64_t> last_time_;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads_;

 public:
  std::vector<size_t> torch_of;  // process -> its PyTorch trace (SIZE_MAX: none)
};

}  // namespace

Run analyze(const std::vector<std::string>& trace_paths) {
  std::vector<std::unique_ptr<TraceReader>> readers;
  std::vector<std::string> torch_paths;
  for (const auto& path : trace_paths) {
    if (is_side_channel(path))
      torch_paths.push_back(path);
    else
      readers.push_back(std::make_unique<TraceReader>(path));
  }
  return analyze(std::move(readers), torch_paths);
}

Run analyze(std::vector<std::unique_ptr<TraceReader>> readers,
            const std::vector<std::string>& torch_paths) {
  Run run;
  run.processes.resize(readers.size());
  std::vector<Builder> builders;
  builders.reserve(readers.size());
  Builder::DeviceIndex where;
  uint64_t seq = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    run.processes[i].trace_path = readers[i]->name();
    builders.emplace_back(run, run.processes[i], where, seq);
  }
  std::vector<TorchTrace> torch = read_side_channels(run, torch_paths);
  Merge merge(run, readers, torch, builders);
  merge.run();
  for (size_t i = 0; i < readers.size(); ++i) {
    if (merge.torch_of[i] != SIZE_MAX)
      attach_torch_context(run.processes[i], std::move(torch[merge.torch_of[i]].context));
    finish_process(run, run.processes[i], builders[i], readers[i]->name(), readers[i]->problem());
  }
  finish_run(run);
  return run;
}

}  // namespace vramtrace::collector

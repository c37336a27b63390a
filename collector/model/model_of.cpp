// A run's model from its trace files, read to their end: the traces of its processes and their
// PyTorch side channels merged in time order into one builder per process (builder.h), then
// each process and the run finished (see model.h).
#include <algorithm>

#include "collector/ingest/run_files.h"
#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/model/builder.h"
#include "collector/model/merge.h"

namespace vramtrace::collector {

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
  // A bound of what a process may hold (builder.h), reached: the report of it is incomplete.
  if (!builder.limit().empty()) {
    if (p.problem.empty()) p.problem = builder.limit();
    run.problems.push_back(trace_name + ": " + builder.limit());
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

namespace {

// The model of `readers` with the side channels of `torch_paths` and the allocator traces of
// memory snapshots already read (`snapshots`, each paired with its process by pid).
Run model_with(std::vector<std::unique_ptr<TraceReader>> readers,
               const std::vector<std::string>& torch_paths, std::vector<TorchTrace> snapshots,
               const std::vector<std::string>& notes) {
  Run run;
  for (const auto& note : notes) run.problems.push_back(note);
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
  for (auto& t : snapshots) torch.push_back(std::move(t));
  std::vector<TraceReader*> sources;
  for (auto& r : readers) sources.push_back(r.get());
  Merge merge(run, std::move(sources), torch, builders);
  merge.start();
  merge.run();
  for (size_t i = 0; i < readers.size(); ++i) {
    if (merge.torch_of[i] != SIZE_MAX)
      attach_torch_context(run.processes[i], std::move(torch[merge.torch_of[i]].context));
    finish_process(run, run.processes[i], builders[i], readers[i]->name(), readers[i]->problem());
  }
  finish_run(run);
  return run;
}

}  // namespace

Run model_of(const std::vector<std::string>& paths) {
  RunFiles files = open_run(paths);
  if (!files.problems.empty()) throw TraceError(files.problems.front());
  return model_with(std::move(files.traces), files.side_channels, std::move(files.snapshots),
                    files.notes);
}

Run model_of(RunFiles files) {
  Run run = model_with(std::move(files.traces), files.side_channels, std::move(files.snapshots),
                       files.notes);
  for (auto& problem : files.problems) run.problems.push_back(problem);
  return run;
}

Run model_of(std::vector<std::unique_ptr<TraceReader>> readers,
             const std::vector<std::string>& torch_paths) {
  return model_with(std::move(readers), torch_paths, {}, {});
}

}  // namespace vramtrace::collector

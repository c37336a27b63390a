// The model of a run that goes on, read on at each moment (collector/model/live_model.h).
#include "collector/model/live_model.h"

#include <sys/stat.h>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/builder.h"
#include "collector/model/merge.h"

namespace vramtrace::collector {

namespace {

// A side channel's file as it is now: rewritten files are new files (renamed into place).
struct FileId {
  bool exists = false;
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileId& o) const {
    return exists == o.exists && dev == o.dev && ino == o.ino && size == o.size &&
           mtime_ns == o.mtime_ns;
  }
};

FileId file_id(const std::string& path) {
  struct stat st {};
  FileId id;
  if (stat(path.c_str(), &st) != 0) return id;
  id.exists = true;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

uint64_t events_of(const Run& run) {
  uint64_t n = 0;
  for (const auto& p : run.processes) n += p.events;
  return n;
}

}  // namespace

// Everything the model keeps; never moved once made (the builders point into it).
struct LiveModel::State {
  Run run;
  Builder::DeviceIndex where;
  uint64_t seq = 0;
  std::vector<std::string> paths;  // of the traces read, in order
  std::vector<std::unique_ptr<TraceReader>> readers;
  std::vector<uint64_t> ends;
  std::vector<bool> ended;  // taken as ended (closed and spent): the merge may have gone past
  std::vector<std::string> side_paths;
  std::vector<FileId> side_ids;
  std::vector<TorchTrace> torch;
  // PyTorch's view of each side channel, made once (it depends on the side channel alone).
  std::vector<std::shared_ptr<const TorchMemory>> torch_memory;
  std::vector<std::shared_ptr<const TorchContext>> torch_context;
  std::vector<Builder> builders;
  std::unique_ptr<Merge> merge;
};

LiveModel::LiveModel() = default;
LiveModel::~LiveModel() = default;

Run LiveModel::moment(const std::vector<LiveTrace>& traces,
                      const std::vector<std::string>& side_channels) {
  cost_ = {};
  std::vector<std::string> unreadable;
  if (!state_ || !read_on(traces, side_channels, unreadable)) {
    unreadable.clear();
    start_over(traces, side_channels, unreadable);
  }
  Run run = finished_copy();
  for (auto& u : unreadable) run.problems.push_back(std::move(u));
  return run;
}

bool LiveModel::read_on(const std::vector<LiveTrace>& traces,
                        const std::vector<std::string>& side_channels,
                        std::vector<std::string>& unreadable) {
  State& s = *state_;
  if (side_channels != s.side_paths) return false;
  for (size_t t = 0; t < side_channels.size(); ++t)
    if (!(file_id(side_channels[t]) == s.side_ids[t])) return false;
  // The same traces, in the same order; a trace that was not readable still is not.
  std::vector<const LiveTrace*> mine;
  for (const LiveTrace& trace : traces) {
    if (mine.size() < s.paths.size() && trace.path == s.paths[mine.size()]) {
      mine.push_back(&trace);
      continue;
    }
    try {
      TraceReader reader(trace.path, trace.end);
      return false;  // a new process
    } catch (const TraceError& e) {
      unreadable.push_back(e.what());
    }
  }
  if (mine.size() != s.paths.size()) return false;  // a trace went
  std::vector<bool> open(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const uint64_t end = mine[i]->end;
    open[i] = mine[i]->open;
    if (end == s.ends[i]) continue;
    if (end < s.ends[i] || s.ended[i] || !s.readers[i]->read_on(end)) return false;
    s.ends[i] = end;
    s.merge->pull_again(i);
  }
  const uint64_t before = events_of(s.run);
  s.merge->run([&open](size_t i) { return static_cast<bool>(open[i]); });
  for (size_t i = 0; i < open.size(); ++i)
    if (!open[i] && !s.merge->waiting(i)) s.ended[i] = true;
  cost_.applied = events_of(s.run) - before;
  return true;
}

void LiveModel::start_over(const std::vector<LiveTrace>& traces,
                           const std::vector<std::string>& side_channels,
                           std::vector<std::string>& unreadable) {
  cost_.started_over = true;
  state_ = std::make_unique<State>();
  State& s = *state_;
  std::vector<bool> open;
  for (const LiveTrace& trace : traces) {
    try {
      s.readers.push_back(std::make_unique<TraceReader>(trace.path, trace.end));
      s.paths.push_back(trace.path);
      s.ends.push_back(trace.end);
      open.push_back(trace.open);
    } catch (const TraceError& e) {
      unreadable.push_back(e.what());
    }
  }
  const size_t n = s.readers.size();
  s.ended.assign(n, false);
  s.run.processes.resize(n);
  s.builders.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    s.run.processes[i].trace_path = s.readers[i]->name();
    s.builders.emplace_back(s.run, s.run.processes[i], s.where, s.seq);
  }
  // Identified before they are read: a file rewritten meanwhile is read again next time.
  s.side_paths = side_channels;
  for (const auto& path : side_channels) s.side_ids.push_back(file_id(path));
  s.torch = read_side_channels(s.run, side_channels);
  s.torch_memory.resize(s.torch.size());
  s.torch_context.resize(s.torch.size());
  std::vector<TraceReader*> sources;
  for (auto& r : s.readers) sources.push_back(r.get());
  s.merge = std::make_unique<Merge>(s.run, std::move(sources), s.torch, s.builders);
  s.merge->start();
  s.merge->run([&open](size_t i) { return static_cast<bool>(open[i]); });
  for (size_t i = 0; i < n; ++i)
    if (!open[i] && !s.merge->waiting(i)) s.ended[i] = true;
  cost_.applied = events_of(s.run);
}

Run LiveModel::finished_copy() {
  State& s = *state_;
  // The copy is made in place of its own: its builders point into it.
  struct Copy {
    Run run;
    Builder::DeviceIndex where;
    uint64_t seq = 0;
    std::vector<Builder> builders;
    std::vector<std::unique_ptr<TraceReader>> clones;
  };
  auto c = std::make_unique<Copy>();
  c->run = s.run;
  c->where = s.where;
  c->seq = s.seq;
  const size_t n = s.readers.size();
  c->builders.reserve(n);
  std::vector<TraceReader*> sources;
  std::vector<const TraceReader*> problem_of;
  for (size_t i = 0; i < n; ++i) {
    c->builders.emplace_back(s.builders[i], c->run, c->run.processes[i], c->where, c->seq);
    TraceReader* reader = s.readers[i].get();  // spent: the copy never reads it
    if (s.merge->waiting(i)) {
      c->clones.push_back(s.readers[i]->clone());
      if (!c->clones.back()) throw TraceError(s.paths[i] + ": cannot be opened again");
      reader = c->clones.back().get();
    }
    sources.push_back(reader);
    problem_of.push_back(reader);
  }
  Merge merge(*s.merge, c->run, std::move(sources), c->builders);
  const uint64_t before = events_of(c->run);
  merge.run();
  cost_.applied_to_copy = events_of(c->run) - before;
  for (size_t i = 0; i < n; ++i) {
    ProcessModel& p = c->run.processes[i];
    if (const size_t t = merge.torch_of[i]; t != SIZE_MAX) {
      if (!s.torch_context[t]) {
        ProcessModel view;
        attach_torch_context(view, s.torch[t].context);
        s.torch_memory[t] = view.torch_memory;
        s.torch_context[t] = view.torch_context;
      }
      p.torch_memory = s.torch_memory[t];
      p.torch_context = s.torch_context[t];
    }
    finish_process(c->run, p, c->builders[i], s.readers[i]->name(), problem_of[i]->problem());
  }
  finish_run(c->run);
  return std::move(c->run);
}

}  // namespace vramtrace::collector

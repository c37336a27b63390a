// The merge of a run's sources in time order (collector/model/merge.h).
#include "collector/model/merge.h"

namespace vramtrace::collector {

using format::RecordType;

Merge::Merge(Run& run, std::vector<TraceReader*> readers, const std::vector<TorchTrace>& torch,
             std::vector<Builder>& builders)
    : torch_of(readers.size(), SIZE_MAX),
      run_(&run),
      readers_(std::move(readers)),
      torch_(&torch),
      builders_(&builders),
      pending_(readers_.size()),
      waiting_(readers_.size() + torch.size(), false),
      torch_pos_(torch.size(), 0),
      builder_of_(readers_.size() + torch.size(), SIZE_MAX),
      last_time_(readers_.size() + torch.size(), 0) {}

Merge::Merge(const Merge& other, Run& run, std::vector<TraceReader*> readers,
             std::vector<Builder>& builders)
    : Merge(other) {
  run_ = &run;
  readers_ = std::move(readers);
  builders_ = &builders;
}

void Merge::start() {
  for (size_t i = 0; i < readers_.size(); ++i) {
    builder_of_[i] = i;
    pull(i);
  }
  for (size_t t = 0; t < torch_->size(); ++t) pair_side_channel(t);
}

bool Merge::run(const std::function<bool(size_t)>& open) {
  auto stalls = [&](size_t i) { return i < readers_.size() && !waiting_[i] && open && open(i); };
  std::vector<Builder>& builders = *builders_;
  if (torch_->empty() && readers_.size() == 1) {
    // One process: its trace's order, without the heap.
    if (waiting_[0]) {
      heads_.pop();
      waiting_[0] = false;
      builders[0].apply(pending_[0]);
    }
    while (readers_[0]->next(pending_[0])) builders[0].apply(pending_[0]);
    return stalls(0);
  }
  for (size_t i = 0; i < readers_.size(); ++i)
    if (stalls(i)) return true;
  while (!heads_.empty()) {
    const Head h = heads_.top();
    heads_.pop();
    waiting_[h.source] = false;
    if (h.source < readers_.size()) {
      builders[builder_of_[h.source]].apply(pending_[h.source]);
    } else {
      const size_t t = h.source - readers_.size();
      const TorchEvent& e = (*torch_)[t].events[torch_pos_[t]];
      builders[builder_of_[h.source]].apply(e.record, true, e.stream);
      ++torch_pos_[t];
    }
    pull(h.source);
    if (stalls(h.source)) return true;
  }
  return false;
}

// A trace starts with its Process record: PyTorch's trace goes to the process of its pid.
void Merge::pair_side_channel(size_t t) {
  const size_t source = readers_.size() + t;
  const TorchTrace& torch = (*torch_)[t];
  for (size_t i = 0; i < readers_.size(); ++i)
    if (waiting_[i] && pending_[i].type == RecordType::Process &&
        pending_[i].process.pid == torch.pid)
      builder_of_[source] = i;
  if (builder_of_[source] == SIZE_MAX) {
    run_->problems.push_back("PyTorch allocator trace of pid " + std::to_string(torch.pid) +
                             " has no CUDA trace of that process: not merged");
    return;
  }
  ProcessModel& p = run_->processes[builder_of_[source]];
  p.torch_trace = true;
  p.torch_trace_problem = torch.problem;
  torch_of[builder_of_[source]] = t;
  pull(source);
}

void Merge::pull(size_t i) {
  if (i < readers_.size()) {
    if (!readers_[i]->next(pending_[i])) return;
    if (pending_[i].time_ns) last_time_[i] = pending_[i].time_ns;
  } else {
    const size_t t = i - readers_.size();
    if (torch_pos_[t] >= (*torch_)[t].events.size()) return;
    const uint64_t time = (*torch_)[t].events[torch_pos_[t]].record.time_ns;
    if (time) last_time_[i] = time;
  }
  waiting_[i] = true;
  heads_.push({last_time_[i], i});
}

}  // namespace vramtrace::collector

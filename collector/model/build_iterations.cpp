// The builder's iterations: kernel launches and their rhythm, NVTX ranges, vramtrace_step()
// marks, and, once the trace is read, the iterations found from the best of them (see
// builder.h).
#include "collector/model/builder.h"

namespace vramtrace::collector {

using format::Api;
using format::Record;
using format::RecordType;
namespace rec = format::rec;

namespace {

constexpr size_t kMaxPhases = 20000;          // completed NVTX ranges kept per process
constexpr size_t kMaxRangeStarts = 1u << 20;  // depth-0 range starts kept, of all names

}  // namespace

void Builder::on_range_push(const rec::RangePush& r, uint64_t t) {
  auto it = open_ranges_.find(r.thread);
  if (it == open_ranges_.end()) {
    if (open_ranges_.size() >= kMaxRangeThreads) {
      if (limit_.empty())
        reach_limit("NVTX ranges open on more than " + std::to_string(kMaxRangeThreads) +
                    " threads: those of the threads after them are not kept");
      return;
    }
    it = open_ranges_.try_emplace(r.thread).first;
  }
  OpenRanges& ranges = it->second;
  if (ranges.open.size() >= kMaxRangeDepth) {
    // A push never popped, in a loop, is the usual way here: the outermost ranges stay.
    if (ranges.deeper++ == 0 && limit_.empty())
      reach_limit("NVTX ranges nested more than " + std::to_string(kMaxRangeDepth) +
                  " deep on thread " + std::to_string(r.thread) +
                  ": the deeper ones are counted, not kept");
    return;
  }
  ranges.open.emplace_back(r.name_id, t);
  if (ranges.open.size() == 1 && range_starts_ < kMaxRangeStarts) {
    top_range_starts_[r.name_id].push_back(t);
    ++range_starts_;
  }
  ranges_seen_ = true;
}

void Builder::on_range_pop(const rec::RangePop& r, uint64_t t) {
  auto it = open_ranges_.find(r.thread);
  if (it == open_ranges_.end()) return;  // pushed before we started
  OpenRanges& ranges = it->second;
  if (ranges.deeper) {
    --ranges.deeper;
    return;
  }
  if (ranges.open.empty()) return;
  auto [name, start] = ranges.open.back();
  ranges.open.pop_back();
  ++p_->phases_total;
  if (p_->phases.size() < kMaxPhases)
    p_->phases.push_back({name, r.thread, static_cast<uint32_t>(ranges.open.size()), start, t});
  auto st = p_->range_stats.find(name);
  if (st == p_->range_stats.end()) {
    if (p_->range_stats.size() >= kMaxRangeNames) {
      if (limit_.empty())
        reach_limit("NVTX ranges of more than " + std::to_string(kMaxRangeNames) +
                    " names: the times of the names after them are not kept");
      return;
    }
    st = p_->range_stats.try_emplace(name).first;
  }
  ++st->second.count;
  st->second.total_ns += t - std::min(t, start);
}

void Builder::on_step(uint64_t t) {
  if (steps_.size() < kMaxRangeStarts) steps_.push_back(t);
}

void Builder::find_iterations() {
  // The optimizer's steps are exact iterations; so are vramtrace_step() and NVTX ranges;
  // the forwards of the first model stand in for an evaluation; the launch rhythm is the
  // last resort, never used for a PyTorch program whose hook saw its forwards.
  const TorchMemory* tm = p_->torch_memory.get();
  if (tm && tm->optimizer_steps() > 0) {
    p_->iterations = tm->iterations();
    p_->iteration_source = tm->iteration_source();
    return;
  }
  if (steps_.size() >= 2) {
    p_->iterations = steps_;
    p_->iteration_source = "vramtrace_step()";
    return;
  }
  uint32_t best = 0;
  size_t best_n = 0;
  for (auto& [name, starts] : top_range_starts_)
    if (starts.size() > best_n) {
      best = name;
      best_n = starts.size();
    }
  if (best_n >= 3) {
    p_->iterations = top_range_starts_[best];
    p_->iteration_source = "NVTX range '" + p_->kernel_name(best) + "'";
    return;
  }
  if (tm && !tm->iterations().empty()) {
    p_->iterations = tm->iterations();
    p_->iteration_source = tm->iteration_source();
    return;
  }
  const Rhythm* anchor = nullptr;
  uint32_t anchor_id = 0;
  for (uint32_t id = 0; id < rhythm_.size(); ++id) {
    const auto& r = rhythm_[id];
    if (r.dropped || r.count < 3 || r.gap < 1) continue;
    // At most one in ten gaps may differ (a warm-up iteration, a checkpoint step).
    if (r.gap_matches * 10 < (r.count - 1) * 9) continue;
    // A kernel launched back to back (one kernel per iteration) marks iterations only when
    // device memory was allocated or freed between most of its launches and it is still
    // launched in the last tenth of the run's launches: a burst of the same kernel at
    // start-up has nothing between its launches, or stops long before the end.
    if (r.gap == 1 && (r.separated * 2 < r.count - 1 || r.last_index * 10 < launch_index_ * 9))
      continue;
    // ... and it spans at least half of the run's launches (not a burst at start-up).
    if (r.count * r.gap * 2 < launch_index_) continue;
    if (!anchor || r.gap > anchor->gap ||
        (r.gap == anchor->gap && r.times.front() < anchor->times.front())) {
      anchor = &r;
      anchor_id = id;
    }
  }
  if (anchor) {
    p_->iterations = anchor->times;
    p_->iteration_kernel = anchor_id;
    p_->iteration_period = anchor->gap;
    p_->iteration_source = "kernel";
  }
}

}  // namespace vramtrace::collector

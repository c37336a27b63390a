// Rebuilding the allocation timeline from events (see model.h).
#include "collector/model/model.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <tuple>

namespace vramtrace::collector {

using format::Api;
using format::RecordType;
namespace rec = format::rec;

bool held_by_pool(const ProcessModel& p, const Allocation& a) {
  for (auto& [id, pool] : p.user_pools) {
    if (pool.device != a.device) continue;
    if (a.api == Api::cuMemCreate ? pool.torch : pool.view.covers(a.id, a.bytes)) return true;
  }
  return false;
}

void LaunchCounts::add_new(uint32_t id) {
  if (id >= kDenseIds) {
    if (sparse_[id]++ == 0) ++distinct_;
    return;
  }
  dense_.resize(id + 1);
  dense_[id] = 1;
  ++distinct_;
}

uint64_t LaunchCounts::of(uint32_t id) const {
  if (id < dense_.size()) return dense_[id];
  auto it = sparse_.find(id);
  return it == sparse_.end() ? 0 : it->second;
}

std::vector<std::pair<uint32_t, uint64_t>> LaunchCounts::all() const {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  out.reserve(distinct_);
  for (uint32_t id = 0; id < dense_.size(); ++id)
    if (dense_[id]) out.emplace_back(id, dense_[id]);
  out.insert(out.end(), sparse_.begin(), sparse_.end());
  return out;
}

const std::string& ProcessModel::kernel_name(uint32_t id) const {
  static const std::string graph = "(graph launch)";
  static const std::string none;
  if (id == 0) return none;
  auto it = kernel_names.find(id);
  return it == kernel_names.end() ? none : it->second;
}

void Timeline::add_bucket(uint64_t t, uint64_t bytes) {
  if (!started_) {
    origin_ = t;
    started_ = true;
  }
  uint64_t start = origin_ + (t >= origin_ ? (t - origin_) / width_ * width_ : 0);
  if (!points_.empty() && points_.back().time_ns == start) {
    points_.back().observe(bytes, t);
    return;
  }
  points_.push_back({start, bytes, bytes, bytes, t, t});
  if (points_.size() > max_points_) coarsen();
}

void Timeline::coarsen() {
  while (points_.size() > max_points_) {
    width_ *= 2;
    std::vector<Point> merged;
    merged.reserve(points_.size() / 2 + 1);
    for (const Point& p : points_) {
      uint64_t start = origin_ + (p.time_ns - origin_) / width_ * width_;
      if (!merged.empty() && merged.back().time_ns == start) {
        merged.back().merge(p);
      } else {
        merged.push_back({start, p.max_bytes, p.last_bytes, p.min_bytes, p.max_ns, p.min_ns});
      }
    }
    points_.swap(merged);
  }
}

void PeakTracker::add(const Allocation& a, uint64_t now) {
  live_ += a.bytes;
  if (live_ > peak_) {
    peak_ = live_;
    peak_time_ = now;
    peak_seq_ = a.seq;
    freed_after_peak_.clear();
  }
  timeline.add(now, live_);
}

void PeakTracker::remove(const Allocation& a, uint64_t now) {
  live_ -= std::min(live_, a.bytes);
  if (a.seq <= peak_seq_ && peak_ > 0) freed_after_peak_.push_back(a);
  timeline.add(now, live_);
}

std::vector<Allocation> PeakTracker::live_at_peak(
    const std::vector<const Allocation*>& still_live) const {
  // Sized exactly: a vector grown a push at a time holds up to twice its allocations, and this
  // one can hold every allocation of the process.
  size_t n = freed_after_peak_.size();
  for (const Allocation* a : still_live) n += a->seq <= peak_seq_;
  std::vector<Allocation> out;
  out.reserve(n);
  out.insert(out.end(), freed_after_peak_.begin(), freed_after_peak_.end());
  for (const Allocation* a : still_live)
    if (a->seq <= peak_seq_) out.push_back(*a);
  return out;
}

}  // namespace vramtrace::collector

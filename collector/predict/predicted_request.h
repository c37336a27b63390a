// What collector/predict/request_stream.cpp (a step completed) and fake_step.cpp (a step run
// with a change) share: the hook's predicted requests turned into the engine's requests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

// What each of a predicted step's requests is, by when its block was made and freed.
std::vector<Category> categories_of(const TorchPredictedStep& st);

// The block count of a stream holding `step`'s blocks numbered after the run's `base`.
uint32_t blocks_with(uint32_t base, const TorchPredictedStep& step);

// The CUDA stream of a step's predicted requests: the run's first malloc's from `t0`.
uint64_t step_stream(const RequestStream& run, uint64_t t0);

// The next `window` mallocs of a predicted step from a cursor that only moves forward, by size:
// a recorded run's requests are matched in order against the step's mallocs a little ahead
// (completed_stream, fake_step_stream), and most of a long run's match none, so whether one of
// a size is among them is answered by a count, each request entering and leaving the window
// once: the matching is linear in the requests whatever their sizes.
class MallocWindow {
 public:
  static constexpr uint64_t kFree = UINT64_MAX;  // in `sizes`: not a malloc
  MallocWindow(const std::vector<uint64_t>& sizes, size_t window)
      : sizes_(sizes), window_(window) {}
  // The first malloc at or after `from` of `bytes` among the `window` mallocs from `from`
  // (SIZE_MAX: none). `from` never decreases from one call to the next.
  size_t find(size_t from, uint64_t bytes) {
    while (!in_.empty() && in_.front() < from) {
      auto it = count_.find(sizes_[in_.front()]);
      if (--it->second == 0) count_.erase(it);
      in_.pop_front();
    }
    if (fill_ < from) {
      looked_at_ += from - fill_;  // passed over, never looked at again
      fill_ = from;
    }
    for (; in_.size() < window_ && fill_ < sizes_.size(); ++fill_, ++looked_at_)
      if (sizes_[fill_] != kFree) {
        in_.push_back(fill_);
        ++count_[sizes_[fill_]];
      }
    if (!count_.count(bytes)) return SIZE_MAX;
    for (size_t k : in_) {
      ++looked_at_;
      if (sizes_[k] == bytes) return k;
    }
    return SIZE_MAX;
  }
  // The requests the window has passed, and the window's entries scanned for a size it holds:
  // the work done, at most the step's requests plus `window` per request found.
  uint64_t looked_at() const { return looked_at_; }

 private:
  const std::vector<uint64_t>& sizes_;
  size_t window_;
  std::deque<size_t> in_;                         // the window's mallocs, in order
  size_t fill_ = 0;                               // the next request to look at for the window
  std::unordered_map<uint64_t, uint32_t> count_;  // bytes -> mallocs of it in the window
  uint64_t looked_at_ = 0;
};

// A predicted request as the engine replays it, at `bytes`, its block numbered after `base`.
Request predicted_request(const TorchPredictedRequest& r, const TorchContext& ctx, uint64_t time_ns,
                          uint64_t bytes, uint64_t stream, uint32_t base, Category category,
                          bool categorized);

}  // namespace vramtrace::collector

// What collector/predict/request_stream.cpp (a step completed) and fake_step.cpp (a step run
// with a change) share: the hook's predicted requests turned into the engine's requests.
#pragma once

#include <cstdint>
#include <vector>

#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

// What each of a predicted step's requests is, by when its block was made and freed.
std::vector<Category> categories_of(const TorchPredictedStep& st);

// The block count of a stream holding `step`'s blocks numbered after the run's `base`.
uint32_t blocks_with(uint32_t base, const TorchPredictedStep& step);

// The CUDA stream of a step's predicted requests: the run's first malloc's from `t0`.
uint64_t step_stream(const RequestStream& run, uint64_t t0);

// A predicted request as the engine replays it, at `bytes`, its block numbered after `base`.
Request predicted_request(const TorchPredictedRequest& r, const TorchContext& ctx, uint64_t time_ns,
                          uint64_t bytes, uint64_t stream, uint32_t base, Category category,
                          bool categorized);

}  // namespace vramtrace::collector

// PyTorch's memory of a process at a moment, by category: the blocks' categories (the model's
// TorchMemory gives each block its own) summed, with the allocator's cache and what lies outside
// PyTorch's allocator, attributed by the library that allocated it (its stack).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/model/allocation.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

class StackResolver;

// The device's memory of one process at a moment, by category: the PyTorch blocks live then,
// the allocator's cache (its segments less those blocks) and the driver allocations outside
// PyTorch's allocator by the library that made them. `driver_live` is every driver allocation
// live then (its bytes are the device figure the categories add up to).
// `driver_total` is what the process held on the device then (the figure the categories add
// up to); `outside` the driver allocations live then that may lie outside PyTorch's segments
// (a partial list is fine: what it does not name is "outside PyTorch"). The private pools'
// segments count whole as CUDA-graph / private pools, their blocks within them.
CategoryBytes categorize(const TorchMemory& tm, uint32_t device, uint64_t t, uint64_t driver_total,
                         const std::vector<Allocation>& outside, StackResolver* stacks);

// The category of memory a library allocated outside PyTorch's allocator, by its file's name:
// NCCL's is communication, cuBLAS's, cuDNN's and the other CUDA math libraries' workspaces,
// any other library's outside PyTorch.
Category library_category(const std::string& library);

// Whether a block of category `c` live at both ends of a gap of the trace (--torch=sampled) is
// taken as live all through it: parameters and optimizer state, made once, and the private
// pools' segments. Any other may have been freed and made again at the same address in it.
inline bool known_in_gap(Category c) {
  return c == Category::Parameters || c == Category::OptimizerState || c == Category::PrivatePool;
}

}  // namespace vramtrace::collector

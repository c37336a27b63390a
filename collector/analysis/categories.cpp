// PyTorch's memory of a moment by category (categories.h).
#include "collector/analysis/categories.h"

#include <algorithm>

#include "collector/analysis/stacks.h"

namespace vramtrace::collector {

Category library_category(const std::string& lib) {
  if (lib.find("nccl") != std::string::npos) return Category::Communication;
  for (const char* math : {"cublas", "cudnn", "cufft", "cusparse", "cusolver"})
    if (lib.find(math) != std::string::npos) return Category::Workspaces;
  return Category::OutsidePytorch;
}

CategoryBytes categorize(const TorchMemory& tm, uint32_t device, uint64_t t, uint64_t driver_total,
                         const std::vector<Allocation>& outside, StackResolver* stacks) {
  CategoryBytes out{};
  uint64_t blocks = 0;
  // Inside a gap of the trace (--torch=sampled) only what known_in_gap() says stays classified.
  const bool gap = gap_at(tm.context(), device, t) != nullptr;
  for (size_t i : tm.live_at(device, t)) {
    Category c = tm.info()[i].category;
    if (gap && !known_in_gap(c)) c = Category::Unclassified;
    out[static_cast<size_t>(c)] += tm.context().blocks[i].bytes;
    if (c != Category::PrivatePool) blocks += tm.context().blocks[i].bytes;
  }
  // The private pools' segments whole (their free bytes are no other block's to take).
  uint64_t& pool = out[static_cast<size_t>(Category::PrivatePool)];
  pool = std::max(pool, tm.private_reserved_at(device, t));
  blocks += pool;
  uint64_t reserved = std::min(tm.reserved_at(device, t), driver_total);
  // Before the window of a ring that dropped its earliest entries, what PyTorch's allocator
  // held is not known: its segments' bytes are unclassified, not cache nor outside PyTorch.
  const auto window = tm.context().window_start.find(device);
  // So too while the trace was off (--torch=sampled): the blocks made and freed then, and the
  // segments, are known only at the gap's end; the blocks live all through it are known.
  const bool unknown = gap || (window != tm.context().window_start.end() && t < window->second);
  if (blocks > reserved) {
    // The allocator's own records of a segment can trail the driver's by microseconds.
    reserved = std::min(blocks, driver_total);
  }
  out[static_cast<size_t>(gap ? Category::Unclassified : Category::AllocatorCache)] +=
      reserved - std::min(reserved, blocks);
  uint64_t rest = driver_total - reserved;
  for (const Allocation& a : outside) {
    if (!rest) break;
    if (a.space != 0 || tm.is_segment(device, a.id)) continue;
    Category c = Category::OutsidePytorch;
    if (stacks && (a.stack || a.py_stack))
      c = library_category(stacks->attribute(a.stack, a.py_stack).library);
    const uint64_t take = std::min(rest, a.bytes);
    out[static_cast<size_t>(c)] += take;
    rest -= take;
  }
  out[static_cast<size_t>(unknown ? Category::Unclassified : Category::OutsidePytorch)] += rest;
  return out;
}

}  // namespace vramtrace::collector

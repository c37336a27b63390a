// What was live at a moment (a device's peak, an OOM, the end of a process), grouped the way a
// person looks for the owner: by the site that allocated it, by the library that holds it and
// by whole stack, with the largest allocations themselves. An allocation's site is its stack's,
// or for a block of PyTorch's caching allocator what the start-up hook's context says the block
// is (a named tensor, the module whose forward made it, the user's line that ran the phase).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/leaks.h"
#include "collector/analysis/stacks.h"
#include "collector/model/allocation.h"

namespace vramtrace::collector {

// Where an allocation came from: its stack's site, or the driver entry point that made it when
// the trace has no stack for it (stacks off, or an older trace).
struct Site {
  std::string text;
  std::string library;                 // the owning library, "" when unknown
  const Attribution* stack = nullptr;  // its frames (null: none), owned by the StackResolver
};

Site site_of(const Allocation& a, StackResolver& stacks);

// site_of's text, for the collector's groupings by site (leaks.h's SiteOf).
SiteOf site_text_of(StackResolver& stacks);

// The stacks an allocation is resolved with: one process's, or each its own at a device's
// run-wide peak.
using StacksOf = std::function<StackResolver&(const Allocation&)>;

// A site's allocations: bytes, count and the distinct sizes (largest size first, with their
// counts), with the owning library and the stack of the group's largest allocation.
struct SiteGroup {
  std::string site;
  uint64_t bytes = 0, count = 0;
  std::vector<std::pair<uint64_t, uint64_t>> sizes;
  std::string library;
  const Attribution* stack = nullptr;
};

// An owning library's allocations ("(unknown)" without a stack).
struct LibraryGroup {
  std::string library;
  uint64_t bytes = 0, count = 0;
};

// A whole stack's allocations. Without a stack (`stack` null) the site is the driver entry
// point; past the first kTopStacks groups the rest is one "(other stacks)" group, so that the
// groups add up to the whole.
struct StackGroup {
  std::string site, library;
  uint64_t bytes = 0, count = 0;
  const Attribution* stack = nullptr;
};
inline constexpr size_t kTopStacks = 20;

// Largest first, each.
std::vector<SiteGroup> by_site(const std::vector<Allocation>& allocs, const StacksOf& stacks_of);
std::vector<SiteGroup> by_site(const std::vector<Allocation>& allocs, StackResolver& stacks);
std::vector<LibraryGroup> by_library(const std::vector<Allocation>& allocs,
                                     const StacksOf& stacks_of);
// With several processes, the same stack of each (workers of one program) is one group.
std::vector<StackGroup> by_stack(const std::vector<Allocation>& allocs, const StacksOf& stacks_of);

// One of the largest allocations of a live set, with its site.
struct LiveAllocation {
  const Allocation* allocation = nullptr;  // in the model (collector::Run)
  Site site;
};

// A live set grouped: by site, by library, by whole stack (at peaks only: `with_stacks`), and
// its `largest` allocations (the set is largest first).
struct LiveSet {
  std::vector<SiteGroup> by_site;
  std::vector<LibraryGroup> by_library;
  std::vector<StackGroup> by_stack;
  std::vector<LiveAllocation> largest;
};
LiveSet live_set(const std::vector<Allocation>& live, const StacksOf& stacks_of, size_t largest,
                 bool with_stacks);

}  // namespace vramtrace::collector

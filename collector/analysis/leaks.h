// Memory that stays live: sites whose memory accumulates across iterations (growth), and what
// a process still held on a device at its end, split into leak suspects (or, for a process
// that died, what was live when it died), segments a sub-allocator only cached, and the
// model's own named tensors. The report renders these; the decisions are made here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collector/model/allocation.h"
#include "collector/model/model.h"

namespace vramtrace::collector {

// The site an allocation is grouped under (its stack's site, or what stands in for one).
using SiteOf = std::function<std::string(const Allocation&)>;

// One site whose live memory grew across iterations.
struct SiteGrowth {
  std::string site;
  // One of the site's allocations, one with a stack when any has one: the report takes the
  // site's library and stack from it.
  Allocation example;
  uint64_t bytes = 0;                // live, allocated by the site since the first iteration
  uint64_t bytes_per_iteration = 0;  // bytes over the iterations from its first to its last
  int64_t iterations = 0;            // iterations whose allocations are still live
  int64_t first_iteration = 0, last_iteration = 0;
  uint64_t since_ns = 0;  // when its first iteration began (the trace's clock)
  std::string seen_at;    // the moment that showed it ("exit", "peak", "allocator peak")
};

// Of what is live at `until` (the end, an OOM), what each site allocated in each iteration. A
// site grows when what it allocated in at least 3 iterations, and in at least half of the
// iterations since its first, is still live, up to the last iterations before `until`.
// Largest rate first; empty with fewer than 3 iterations.
std::vector<SiteGrowth> growth_by_site(const std::vector<Allocation>& live, const ProcessModel& p,
                                       uint64_t until, const SiteOf& site_of);

// Growth on device `d` seen at three moments: the end (of `suspects`, what was left that no
// allocator only cached), the in-use peak of the driver's allocations and that of the pools'
// blocks (a program that frees what it kept only at its end still held it at its peak). Per
// site, the moment that shows the most bytes; largest rate first.
std::vector<SiteGrowth> device_growth(const ProcessModel& p, const DeviceModel& d,
                                      const std::vector<Allocation>& suspects,
                                      const SiteOf& site_of);

// Whether the process died (a signal, an exception that reached the top, a fatal OOM) rather
// than ended: it did not free what it held, so that is what was live when it died, not a leak.
bool process_died(const ProcessModel& p);

// What the process still held on `device` at its end.
struct StillLive {
  std::vector<Allocation> suspects;      // leak suspects (what was live at death when it died)
  uint64_t retained_segment_bytes = 0;   // segments a sub-allocator carves blocks from: cached
  uint64_t model_state_bytes = 0;        // named parameters, buffers, gradients, optimizer state
  uint64_t cuda_graph_bytes = 0;         // blocks in CUDA graphs' private pools: the graphs' own
  uint64_t library_workspace_bytes = 0;  // the math libraries' handles' workspaces (PyTorch's)
};

// The library an allocation is attributed to (its stack's), "" when it has no stack.
using LibraryOf = std::function<std::string(const Allocation&)>;

// `still`: the driver allocations and VMM handles live at the end on `device`. What a
// sub-allocator only caches (its segments) is retained, not leaked: its blocks still handed
// out are the suspects, except a model still referenced at exit (a global) of a process that
// did not die, which is the model, and the blocks of its CUDA graphs' private pools (a graph's
// static outputs and scratch, held by the graph for its next replay). PyTorch keeps each
// thread's cuBLAS and cuDNN handles, and their workspaces, for the life of the process and never
// frees them: at its clean exit what `library_of` attributes to a math library is the library's
// own, not a suspect (a native program that never destroys its handles keeps them as suspects).
StillLive still_live(const ProcessModel& p, uint32_t device, const std::vector<Allocation>& still,
                     bool died, const LibraryOf& library_of);

}  // namespace vramtrace::collector

// `vramtrace export --memory-viz`: a process of a recorded run as a PyTorch memory snapshot, the
// dict torch.cuda.memory._snapshot() returns and _dump_snapshot() pickles, which
// pytorch.org/memory_viz and torch/cuda/_memory_viz.py read: "segments" (the allocator's
// segments at the end, each with its blocks tiling it) and "device_traces" (per device, the
// allocator's actions in order: alloc, free_requested, free_completed, segment_alloc,
// segment_free, segment_map, segment_unmap, oom). A PyTorch process gives its caching
// allocator's blocks and segments (from the trace the start-up hook wrote), each block's frames
// what vramtrace knows of it: its category, module and the user's line. A native program gives
// its driver allocations, each a segment holding one block, with its recorded stack.
#pragma once

#include <cstddef>
#include <string>

#include "collector/analysis/analysis.h"
#include "report/pickle.h"

namespace vramtrace::report {

// What the snapshot was made from, for the words said about it.
struct MemoryViz {
  pickle::Value snapshot;
  bool pytorch = false;  // PyTorch's allocator; false: the driver's allocations
  size_t segments = 0, events = 0;
};

// The snapshot of a.processes[process]. A native process's history is read again from its
// trace (the model keeps only what was live at its peaks): throws collector::TraceError when
// the trace cannot be read.
MemoryViz memory_viz(const collector::RunAnalysis& a, size_t process);

}  // namespace vramtrace::report

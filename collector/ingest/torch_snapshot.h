// A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle, as pytorch.org/memory_viz
// opens it) read as a run of one process: its allocator trace (device_traces: alloc,
// free_completed, segment_alloc/free/map/unmap, oom, with their frames), its allocator state at
// the dump (segments and their blocks) and its settings (allocator_settings) become the start-up
// hook's side channel (torch_trace.h, read by its own reader), and a process that stands for the
// snapshot's (a trace in memory: its pid, its devices), so that every command reads a snapshot as
// it reads a recorded run. The pickle is read by pickle.h's restricted reader: nothing in it runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collector/ingest/torch_trace.h"

namespace vramtrace::collector {

// Whether a file begins as a pickle of protocol 2 or later does (0x80, then the protocol).
bool starts_as_pickle(const std::string& path);

struct TorchSnapshot {
  std::vector<uint8_t> process_trace;  // a trace stream: the process, its devices, its end
  TorchTrace torch;                    // its allocator trace, as the side channel's reader read it
  // What the snapshot is (its pickle protocol, its layout's PyTorch version, its entries): the
  // command line of the process that stands for it (report.json's processes[].cmdline).
  std::string description;
  // What it cannot say (an empty history, entries without times): said among the run's problems.
  std::vector<std::string> problems;
};

// Reads a snapshot from its bytes; `name` names it in messages and `pid` is the process it stands
// for (distinct per snapshot of one run). Throws TraceError (naming `name`) when it is not a
// snapshot this reader takes: not a pickle, a pickle that would run code, a damaged one, or one
// without the snapshot's keys.
TorchSnapshot torch_snapshot_of(std::string_view bytes, const std::string& name, uint64_t pid);
// The same from a file.
TorchSnapshot read_torch_snapshot(const std::string& path, uint64_t pid);

}  // namespace vramtrace::collector

// PyTorch's allocator trace, as vramtrace's start-up hook (python/sitecustomize.py) wrote it
// from torch.cuda.memory._snapshot() at exit or at an OOM: the caching allocator's segments
// (segment_alloc/free, and segment_map/unmap with expandable segments), blocks (alloc,
// free_completed) and OOMs, each with the Python frames PyTorch recorded.
//
// File format (UTF-8 text, tab-separated, one record per line):
//   vramtrace.torch/1  pid  realtime_ns  monotonic_ns  torch_version      (first line)
//   F  frame_id  filename  line  function                                 (a Python frame)
//   E  device  action  address  bytes  stream  time_us  frame_ids  device_free
//   W  device  entries                          (the trace ring buffer was full: start lost)
//   END  entries                                 (the file is complete)
// frame_ids: comma-separated, innermost first; time_us: the Unix epoch, PyTorch's clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/trace_reader.h"

namespace vramtrace::collector {

struct TorchTrace {
  uint64_t pid = 0;
  std::string torch_version;
  // UserPool, UserSegment, UserBlock, UserOom records (with PyCode, PyStackNode and AllocStack
  // records for their frames), in time order, times on the traced host's CLOCK_MONOTONIC.
  std::vector<Event> events;
  std::string problem;  // why it is incomplete ("" when complete)
};

// Pool ids of PyTorch's per-device pools (never handed out by vramtrace.h, which counts up).
inline constexpr uint64_t kTorchPoolBase = 1ull << 62;
// Trace-tree and code ids of PyTorch's frames (the traced process's own count up from 1).
inline constexpr uint32_t kTorchNodeBase = 0xC0000000u;

// Throws TraceError when the file cannot be read or is not a PyTorch allocator trace; a file
// cut short or with bad lines keeps what came before and says so in `problem`.
TorchTrace read_torch_trace(const std::string& path);

}  // namespace vramtrace::collector

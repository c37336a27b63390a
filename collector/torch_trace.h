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
// Version 2 adds what the start-up hook saw of the program (collector/torch_memory.h uses it):
//   M  module_id  qualified_name  class  file  line    (an nn.Module, first called)
//   S  site_id  file  line  function                    (a line of the user's code)
//   K  time_ns  kind  id        (a mark: module call, forward, backward, optimizer step, site;
//                               a forward's id has bit 31 set under autocast and bit 30 when
//                               the module calls inside it were not traced)
//   L  time_ns  device  storage_ptr  bytes  kind  name  shape  dtype
//                               (a named storage: param, buffer, grad or state, live then)
//   Q  device  fraction  total_bytes                    (torch's per-process memory fraction)
//   X  time_ns  type  message  file:line:function|...   (the exception that ended the program)
//   D  marks                                           (the oldest marks were dropped)
//   J  device  in_use  peak_in_use  limit  reserved  largest_alloc   (XLA's pool, from JAX's
//                               memory_stats() at exit; such files end in .jax)
//   P  device  address  bytes  pool_id_0  pool_id_1  kind
//                               (a segment of a private pool at the dump: the snapshot's
//                               segments whose segment_pool_id is not (0, 0); kind "graph" for
//                               a CUDA graph's pool, "pool" for another, e.g. torch.cuda.MemPool)
//   G  device  address  bytes    (a segment at the dump, written when a ring was full)
//   A  device  address  bytes    (a block in use at the dump, written when a ring was full)
//   C  conf                      (PYTORCH_CUDA_ALLOC_CONF, or PYTORCH_ALLOC_CONF, when set)
//   END  entries                                 (the file is complete)
// frame_ids: comma-separated, innermost first; time_us and time_ns: the Unix epoch (PyTorch's
// clock agrees with Python's time.time_ns() to the microsecond: tests/gpu/real/probe_hooks.py).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collector/trace_reader.h"

namespace vramtrace::collector {

// The kinds of K marks (the hook's _MOD... constants, in the same order).
enum class MarkKind : uint8_t {
  Module,
  ModuleEnd,
  Forward,
  ForwardEval,
  ForwardEnd,
  Backward,
  BackwardEnd,
  Step,
  StepEnd,
  Site,
  Oom,
  ForwardEvalGrad,
  Move,
  MoveEnd,
  Named,  // every named storage (parameter, gradient, optimizer state) was labelled just now
  kCount
};

struct TorchSite {
  std::string file, function;
  uint32_t line = 0;
};
struct TorchModule {
  std::string name, type, file;
  uint32_t line = 0;
};
struct TorchMark {
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC, like every other time of the model
  MarkKind kind = MarkKind::Module;
  uint32_t id = 0;  // module id (Module, Forward...), site id (Site), 1 for the first optimizer
  bool autocast = false;  // a forward run under torch.autocast (mixed precision)
  bool untraced = false;  // a forward whose inner module calls were not traced (sampled)
};
struct TorchLabel {
  uint64_t time_ns = 0;
  uint32_t device = 0;
  uint64_t ptr = 0, bytes = 0;
  std::string kind;  // param, buffer, grad, state
  std::string name, shape, dtype;
};
struct TorchLimit {
  double fraction = 1.0;
  uint64_t total_bytes = 0;
};
struct TorchException {
  uint64_t time_ns = 0;
  std::string type, message;
  std::vector<TorchSite> frames;  // innermost first
};
// A block's life, from the trace's alloc and free_completed entries.
struct TorchBlock {
  uint32_t device = 0;
  uint64_t address = 0, bytes = 0;
  uint64_t alloc_ns = 0, free_ns = UINT64_MAX;  // UINT64_MAX: still live at the end
  uint64_t stream =
      0;  // the CUDA stream it was allocated on (the allocator's pools are per stream)
  // Made before the earliest entry PyTorch's ring still held (a long run): known from its
  // free or from the allocator's state at the dump, its moment and context are not.
  bool before_window = false;
};
// A request the allocator could not serve (its trace's oom entry): `bytes` is the request as
// the allocator rounded it (CUDACachingAllocator.cpp's malloc records params.size()).
struct TorchOomRequest {
  uint32_t device = 0;
  uint64_t time_ns = 0, bytes = 0, stream = 0;
  uint64_t device_free = UINT64_MAX;  // cudaMemGetInfo's free bytes then (UINT64_MAX: unknown)
};
// A change of what the allocator reserved from the driver (segments and their mappings).
struct TorchReserve {
  uint32_t device = 0;
  uint64_t address = 0;
  uint64_t time_ns = 0;
  int64_t delta = 0;
  bool map = false;  // segment_map / segment_unmap: a range of an expandable segment
};

// A segment of one of PyTorch's private pools (a CUDA graph's capture pool, a
// torch.cuda.MemPool) when the file was written: its blocks are that pool's.
struct TorchPoolSegment {
  uint32_t device = 0;
  uint64_t address = 0, bytes = 0;
  uint64_t pool_id[2] = {0, 0};  // PyTorch's MempoolId_t: (n, 0) a graph's own, (0, n) a handle
  bool cuda_graph = false;       // the hook saw a CUDA graph capture into it (or (n, 0))
};

// XLA's allocator on one device, as JAX's memory_stats() read it at exit.
struct XlaPool {
  uint64_t in_use = 0, peak_in_use = 0, limit = 0, reserved = 0, largest_alloc = 0;
};

struct TorchContext {
  bool present = false;              // a version 2 file: the hook recorded the program's context
  std::vector<TorchModule> modules;  // by id - 1
  std::vector<TorchSite> sites;      // by id - 1
  std::vector<TorchMark> marks;      // in time order
  std::vector<TorchLabel> labels;    // in time order
  std::map<uint32_t, TorchLimit> limits;  // by device
  std::optional<TorchException> exception;
  std::map<uint32_t, XlaPool> xla;              // by device (a JAX program)
  std::vector<TorchPoolSegment> pool_segments;  // private pools' segments at the dump
  uint64_t dropped_marks = 0;
  std::vector<TorchBlock> blocks;             // in allocation order
  std::vector<TorchReserve> reserves;         // in time order
  std::vector<uint64_t> ooms;                 // times of the allocator's OOMs
  std::vector<TorchOomRequest> oom_requests;  // the same OOMs, with their requests
  std::string torch_version;                  // torch.__version__ of the traced program
  std::optional<std::string> alloc_conf;      // its allocator settings (C line), when recorded
  // Devices whose ring had dropped its earliest entries: the time of the first entry left.
  std::map<uint32_t, uint64_t> window_start;
};

// A record made from PyTorch's trace, and what it knows that the record cannot carry.
struct TorchEvent {
  format::Record record;
  uint64_t stream = 0;  // a block's CUDA stream
};

struct TorchTrace {
  // Moved, never copied: a copy's records would view the original's text. (A std::vector
  // grows by copying what has a copy constructor and no noexcept move, as std::deque's is.)
  TorchTrace() = default;
  TorchTrace(TorchTrace&&) = default;
  TorchTrace& operator=(TorchTrace&&) = default;
  TorchTrace(const TorchTrace&) = delete;
  TorchTrace& operator=(const TorchTrace&) = delete;

  TorchContext context;
  uint64_t pid = 0;
  std::string torch_version;
  // UserPool, UserSegment, UserBlock, UserOom records (with PyCode, PyStackNode and AllocStack
  // records for their frames), in time order, times on the traced host's CLOCK_MONOTONIC.
  std::vector<TorchEvent> events;
  // The text the PyCode records view (a deque: its strings never move, nor when it is moved).
  std::deque<std::string> text;
  std::string problem;  // why it is incomplete ("" when complete)
};

// Pool ids of PyTorch's per-device pools (never handed out by vramtrace.h, which counts up).
inline constexpr uint64_t kTorchPoolBase = 1ull << 62;
// The name of PyTorch's pools (a UserPool record of kTorchPoolBase + device).
inline constexpr const char* kTorchPoolName = "PyTorch caching allocator";
// Trace-tree and code ids of PyTorch's frames (the traced process's own count up from 1).
inline constexpr uint32_t kTorchNodeBase = 0xC0000000u;

// Throws TraceError when the file cannot be read or is not a PyTorch allocator trace; a file
// cut short or with bad lines keeps what came before and says so in `problem`.
TorchTrace read_torch_trace(const std::string& path);

}  // namespace vramtrace::collector

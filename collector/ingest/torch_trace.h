// PyTorch's allocator trace, as vramtrace's start-up hook (python/vramtrace/_hook/sitecustomize.py)
// wrote it from torch.cuda.memory._snapshot() at exit or at an OOM: the caching allocator's
// segments (segment_alloc/free, and segment_map/unmap with expandable segments), blocks (alloc,
// free_completed) and OOMs, each with the Python frames PyTorch recorded; and what the hook saw
// of the program (modules, marks, named storages: collector/model/torch_memory.h uses them). JAX's
// file (.jax) is the same format with XLA's pool statistics. The format, every kind of line
// with its fields, is declared in common/side_channel.h; the reader is torch_trace_reader.h's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/ingest/trace_reader.h"
#include "common/side_channel.h"

namespace vramtrace::collector {

// The kinds of K marks (common/side_channel.h, where the hook's constants are checked against
// them).
enum class MarkKind : uint8_t {
#define VRAMTRACE_MARK_KIND(Name, hook_name) Name,
  VRAMTRACE_SIDE_MARKS(VRAMTRACE_MARK_KIND)
#undef VRAMTRACE_MARK_KIND
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
  uint8_t fed_back = 0;   // FedBack: how many input tensors its previous forward returned
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
  // Made while the trace was off (--torch=sampled): alloc_ns is the gap's end, when the
  // allocator's state showed it; its moment and context are not known.
  bool in_gap = false;
  // A memory snapshot's block whose frames do not say which phase made it (recorded with
  // context=None, or stacks="python" on the autograd engine's thread): not a phase's.
  bool phase_unknown = false;
};
// A stretch while the trace of a device was off (--torch=sampled): what was made and freed in
// it is known from the allocator's state at its end, not when. Blocks freed in it are given
// start_ns, those made in it end_ns. The peaks are PyTorch's max_memory_allocated when the
// trace went off and at the end (unknown: nullopt).
struct TorchGap {
  uint32_t device = 0;
  uint64_t start_ns = 0, end_ns = 0;
  std::optional<uint64_t> start_peak, end_peak;
};
// Whether the allocator trace was sampled and why: the iteration it was judged on (its blocks,
// its time, the trace's estimated cost in it) against the share of an iteration it may cost
// (millionths).
struct TorchTraceCost {
  uint64_t blocks = 0, iteration_ns = 0, trace_ns = 0, budget_ppm = 0;
  bool sampled = false;
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

// A training step the hook predicted for a process that died before its first optimizer step
// ended: the storages its fake-tensor run of the whole step (forward, loss, backward,
// optimizer step) made and freed, in order (common/side_channel.h's N and R lines).
struct TorchPredictedRequest {
  bool free = false;   // false: a block of `bytes` made; true: that block freed
  uint64_t block = 0;  // counts from 1 within the step
  uint64_t bytes = 0;
  uint32_t module = 0;  // TorchContext::modules id, 0: none
  char phase = 'f';     // f forward, l loss, b backward, s optimizer step
};
struct TorchPredictedStep {
  uint32_t device = 0;
  uint64_t id = 0, batch = 0, recorded_batch = 0;
  uint64_t time_ns = 0;  // when the real step began (its first forward), monotonic
  uint64_t blocks = 0;   // blocks its requests make, numbered from 1 in the order made
  std::string status;    // "ok", or why the hook could not predict it
  // The change it was run with (a V line): "" the completion of the step the process never
  // finished; "none" the step as the program runs it (the reference for the changes);
  // "bf16_autocast"; "checkpoint" of `modules` (TorchContext::modules ids).
  std::string change;
  std::vector<uint32_t> modules;
  std::vector<TorchPredictedRequest> requests;
};

// `vramtrace plan` stopped the process before its first training forward ran (a Z line).
struct TorchPlanStop {
  uint64_t time_ns = 0;  // monotonic
  uint64_t batch = 0;
  uint64_t spent_ns = 0;      // the fake steps' time
  bool rng_restored = false;  // the RNG states were read before and put back after
  std::string loss;           // "model", "cross_entropy", "sum", or "" unknown
};

struct TorchContext {
  bool present = false;  // a version 2 file: the hook recorded the program's context
  // Read from a PyTorch memory snapshot (torch_snapshot.h): a moment of a process that went on,
  // not its exit, so what was live then is neither left behind nor held at a death.
  bool from_snapshot = false;
  std::vector<TorchModule> modules;       // by id - 1
  std::vector<TorchSite> sites;           // by id - 1
  std::vector<TorchMark> marks;           // in time order
  std::vector<TorchLabel> labels;         // in time order
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
  std::vector<TorchPredictedStep> predicted_steps;  // by id - 1
  std::vector<TorchGap> gaps;                       // in order of their starts
  std::map<uint32_t, uint64_t> dump_peaks;    // --torch=sampled: max_memory_allocated at the dump
  std::optional<TorchTraceCost> trace_cost;   // whether the trace was sampled, and why
  std::optional<TorchPlanStop> plan_stop;     // `vramtrace plan` stopped the process here
  std::vector<std::string> plan_notes;        // what the plan says of how its steps ran
  std::vector<std::string> step_assumptions;  // what the stand-in step assumed of the loop
  // `vramtrace run --preflight`: the first training step was predicted here, and the program
  // went on (its fields as a plan stop's).
  std::optional<TorchPlanStop> preflight;
};

// The gap of `device` in which PyTorch's peak of allocated memory (its max_memory_allocated,
// the highest the hook read) was reached, when it rose to it while the trace was off: the
// block view then shows the highest traced moment, not the peak. nullopt: reached while the
// trace was on, or not known.
std::optional<TorchGap> gap_of_peak(const TorchContext& ctx, uint32_t device);
// The gap of `device` that holds moment t (start_ns <= t < end_ns), or null.
const TorchGap* gap_at(const TorchContext& ctx, uint32_t device, uint64_t t);

// A record made from PyTorch's trace, and what it knows that the record cannot carry. It owns
// what its record views: a PyCode record's file and function are in `text`, shared by its
// copies (the string never changes, nor moves when the event does).
struct TorchEvent {
  format::Record record;
  uint64_t stream = 0;  // a block's CUDA stream
  std::shared_ptr<const std::string> text;
};

struct TorchTrace {
  TorchContext context;
  uint64_t pid = 0;
  std::string torch_version;
  // UserPool, UserSegment, UserBlock, UserOom records (with PyCode, PyStackNode and AllocStack
  // records for their frames), in time order, times on the traced host's CLOCK_MONOTONIC.
  std::vector<TorchEvent> events;
  std::string problem;  // why it is incomplete ("" when complete)
};

// Pool ids of PyTorch's per-device pools (never handed out by vramtrace.h, which counts up).
inline constexpr uint64_t kTorchPoolBase = 1ull << 62;
// The name of PyTorch's pools (a UserPool record of kTorchPoolBase + device).
inline constexpr const char* kTorchPoolName = "PyTorch caching allocator";
// Trace-tree and code ids of PyTorch's frames (the traced process's own count up from 1).
inline constexpr uint32_t kTorchNodeBase = 0xC0000000u;

}  // namespace vramtrace::collector

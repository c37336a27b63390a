// PyTorch's allocator trace, as vramtrace's start-up hook (python/vramtrace/_hook/sitecustomize.py)
// wrote it from torch.cuda.memory._snapshot() at exit or at an OOM: the caching allocator's
// segments (segment_alloc/free, and segment_map/unmap with expandable segments), blocks (alloc,
// free_completed) and OOMs, each with the Python frames PyTorch recorded; and what the hook saw
// of the program (modules, marks, named storages: collector/model/torch_memory.h uses them). JAX's
// file (.jax) is the same format with XLA's pool statistics. The format, every kind of line
// with its fields, is declared in common/side_channel.h.
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
  std::string status;    // "ok", or why the hook could not predict it
  std::vector<TorchPredictedRequest> requests;
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
  std::vector<TorchPredictedStep> predicted_steps;  // by id - 1
};

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

// Reads a PyTorch allocator trace as it comes: feed() it the file's bytes in any pieces (or
// read_more() a file being written), and the complete lines are read at once; events() and
// context() say what they held, and trace() is the trace so far. A line that stops the
// reading (END, a bad line) ends it: what comes after is not read.
class TorchTraceReader {
 public:
  // name: the file's, for TraceError's messages.
  explicit TorchTraceReader(std::string name);

  // Reads the complete lines of `bytes`, keeping a last line without its newline for the next
  // call. Throws TraceError when the first line is not the header of a PyTorch allocator trace.
  void feed(std::string_view bytes);

  enum class Tail {
    Nothing,    // nothing new
    More,       // new bytes were read (their complete lines with them)
    Restarted,  // the file was replaced (the hook writes a new file at each OOM and renames it
                // into place): the reader started over and read the new one from its start
  };
  // Reads what `path` holds past what was read before, for a caller that tails a file being
  // written. Throws TraceError as feed() does, and when the file cannot be opened.
  Tail read_more(const std::string& path);

  // The events of the lines read so far, in the file's order (trace() puts them in time order
  // and adds what a wrapped ring's state at the dump says was live before its window).
  const std::vector<TorchEvent>& events() const { return trace_.events; }
  // The context so far: marks, labels and reserves in the file's order.
  const TorchContext& context() const { return trace_.context; }
  bool header_read() const { return header_read_; }
  bool stopped() const { return stopped_; }  // END or a bad line was read: nothing more will be

  // The trace of what was read so far, as read_torch_trace() gives a file that ends there (a
  // last line without its newline is left out: it may still be being written). Throws
  // TraceError before the header was read.
  TorchTrace trace() const;
  // The whole trace, the last line without a newline included: the file has ended. The reader
  // is spent.
  TorchTrace finish();

 private:
  struct Frame {
    uint32_t code = 0, line = 0;
  };
  // A ring that dropped its earliest entries: what was live when its window began is what the
  // window frees without having made, and what the dump's allocator state holds that the
  // window did not make (device, address, bytes; the free's time, or UINT64_MAX).
  struct BeforeWindow {
    uint32_t device = 0;
    uint64_t address = 0, bytes = 0, free_ns = UINT64_MAX;
  };

  void line(std::string_view text);
  void header(std::string_view text);
  void fail(const std::string& why);
  void unknown(const side::Split& fields);
  // A line of one kind, read as common/side_channel.h declares it, then given to its handler.
  template <typename Line>
  void dispatch(const side::Split& fields);
  // One handler per kind of line: false when the line is bad in a way its fields alone do not
  // say (a module id out of order, a mark of an unknown kind), before it changes anything.
#define VRAMTRACE_SIDE_HANDLER(Name, tag, since, on_bad, problem, fields) \
  bool on(const side::Name&);
  VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_HANDLER, VRAMTRACE_SIDE_IGNORE, VRAMTRACE_SIDE_IGNORE)
#undef VRAMTRACE_SIDE_HANDLER
  // An E line's parts: its record (false: an action that changes nothing), its place in its
  // device's order, what it changes in the context, the Python stack named before it.
  bool entry_record(const side::Entry& e, TorchEvent* event) const;
  void entry_order(uint32_t device, format::Record& r);
  void entry_context(const side::Entry& e, const format::Record& r, uint64_t stream);
  void entry_stack(std::string_view frame_ids, uint64_t time_ns);
  // trace()'s and finish()'s: the window before each wrapped ring's, the orders.
  void finalize();
  void add_before_window(uint32_t device);

  std::string name_;
  TorchTrace trace_;     // as read so far: events in the file's order
  std::string pending_;  // a line without its newline yet
  bool header_read_ = false, v2_ = false, stopped_ = false, complete_ = false;
  uint64_t offset_ = 0;  // epoch - monotonic, ns
  uint64_t lineno_ = 1, entries_ = 0;
  // What the E lines need of the lines before them.
  std::unordered_map<uint64_t, Frame> frames_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> nodes_;  // (parent, code, line)
  uint32_t next_id_ = kTorchNodeBase;
  std::set<uint32_t> pools_;  // devices whose pool record was sent
  std::map<std::pair<uint32_t, uint64_t>, size_t> live_blocks_;  // (device, address) -> index
  std::set<uint32_t> wrapped_;
  std::map<uint32_t, uint64_t> first_time_;  // device -> its first entry's time
  std::map<uint32_t, uint64_t> last_time_;   // device -> its last entry's time
  std::vector<BeforeWindow> blocks_before_, segments_before_;
  std::set<std::pair<uint32_t, uint64_t>> live_segments_;  // made in the window, not yet freed
  std::vector<BeforeWindow> dump_blocks_, dump_segments_;  // A and G lines
  // read_more()'s file: its identity and how much of it was read.
  uint64_t file_dev_ = 0, file_ino_ = 0, file_offset_ = 0;
};

// The whole file. Throws TraceError when it cannot be read or is not a PyTorch allocator trace;
// a file cut short or with bad lines keeps what came before and says so in `problem`.
TorchTrace read_torch_trace(const std::string& path);

}  // namespace vramtrace::collector

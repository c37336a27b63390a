// The reader of the start-up hook's side channel (torch_trace.cpp): the lines
// common/side_channel.h declares, each given to its handler, into the TorchTrace of
// torch_trace.h (what the model merges and keeps).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/trace_reader.h"
#include "common/side_channel.h"

namespace vramtrace::collector {

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
  // A handler's refusal, with why the line is bad (added to its row's problem): false.
  bool bad(std::string why);
  // An epoch time of `per_unit` ns units onto the monotonic clock; false (bad()) when it cannot be.
  bool monotonic(uint64_t epoch, uint64_t per_unit, uint64_t* out);
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
  // The end of a device's gap (its U line and the H and B lines after it): what the state then
  // holds that was not live is made at the gap's end, what was live and is not there freed at
  // its start.
  void close_gap(uint32_t device);
  void pool_record(uint32_t device);

  std::string name_;
  TorchTrace trace_;     // as read so far: events in the file's order
  std::string pending_;  // a line without its newline yet
  bool header_read_ = false, v2_ = false, stopped_ = false, complete_ = false;
  uint64_t offset_ = 0;  // epoch - monotonic, ns
  std::string why_;      // the handler's words for the line it refused ("": none)
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
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> segment_bytes_;  // live segments' sizes
  // A device's gap: from its O line (time, peak) and its U line with its state.
  struct GapEnd {
    uint64_t time_ns = 0;
    std::optional<uint64_t> peak;
    std::vector<std::pair<uint64_t, uint64_t>> segments, blocks;  // address, bytes
  };
  std::map<uint32_t, std::pair<uint64_t, std::optional<uint64_t>>> gap_start_;
  std::map<uint32_t, GapEnd> gap_end_;
  // read_more()'s file: its identity and how much of it was read.
  uint64_t file_dev_ = 0, file_ino_ = 0, file_offset_ = 0;
};

// The whole file. Throws TraceError when it cannot be read or is not a PyTorch allocator trace;
// a file cut short or with bad lines keeps what came before and says so in `problem`.
TorchTrace read_torch_trace(const std::string& path);

}  // namespace vramtrace::collector

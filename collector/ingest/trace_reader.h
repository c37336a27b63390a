// Reading a vramtrace stream: file header, frames, records -> typed records (format::Record, see
// common/records.h), in stream order.
//
// The reader pulls one frame at a time, so memory stays at one frame whatever the trace size.
// It never trusts its input: a wrong magic or version is refused with a message naming what was
// found; a frame cut off by a crash or a corrupt record ends the stream early, and the reader
// says so (partial()), keeping every event decoded before that point.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/format.h"

namespace vramtrace::collector {

// A stream that is not a vramtrace trace at all, or one of a version we cannot read.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A decoded record: its type, its time and its fields (r.alloc for an Alloc). Its strings view
// the reader's current frame: they are valid until the reader's next call.
using format::Record;

class TraceReader {
 public:
  // The records a trace may decode to: 256 MiB, and 256 bytes for each byte of the file read so
  // far. Past it the reader stops as at a damaged frame (partial(), problem()).
  static constexpr uint64_t kDecodeFloorBytes = 256ull << 20;
  static constexpr uint64_t kDecodePerByte = 256;

  // Opens a trace file. Throws TraceError when it cannot be opened or is not a trace.
  explicit TraceReader(const std::string& path);
  // Reads only the first `max_bytes` of the file, as if it ended there: a trace still being
  // written, read up to the end of its last whole frame (cli/live_report.h).
  TraceReader(const std::string& path, uint64_t max_bytes);
  // Reads a trace from memory (tests, fuzzing). Throws TraceError like the file constructor.
  static std::unique_ptr<TraceReader> from_bytes(std::vector<uint8_t> bytes,
                                                 std::string name = "<memory>");
  ~TraceReader();

  // The next record, or nullopt at the end of the stream (clean or not: see partial()).
  std::optional<Record> next();
  // The same into `r` (the collector's hot loop); false at the end.
  bool next(Record& r);

  // A trace still being written, read to its `max_bytes` (the end of its last whole frame):
  // reads on up to a new end, where the stream stopped cleanly at the old one. False when it
  // cannot (a damaged stream, a trace from memory): a reader of the whole file is needed then.
  bool read_on(uint64_t max_bytes);
  // A second reader of the same file from where this one is: it reads what this one would
  // next, and this one is left as it is (a live report reads ahead on a copy). Null when it
  // cannot be opened again.
  std::unique_ptr<TraceReader> clone() const;

  const std::string& name() const { return name_; }
  bool partial() const { return !problem_.empty(); }
  const std::string& problem() const { return problem_; }
  uint64_t frames() const { return frames_; }
  uint64_t bytes_read() const { return offset_; }
  // Called after each frame is read with the bytes read since the call before (a progress bar).
  void on_progress(std::function<void(uint64_t bytes)> f) { progress_ = std::move(f); }

 private:
  TraceReader() = default;
  void read_header();
  bool load_frame();
  bool next_frame();  // at the end of a frame: checks it, loads the next; false at the end
  enum class Stop { End, CorruptRecord, TooManyRecords };
  [[gnu::noinline]] bool stop(Stop why = Stop::End, int type = 0);  // ends the stream: false
  bool read_exact(void* dst, size_t n, size_t* got);
  uint64_t remaining_input() const;  // bytes left to read, UINT64_MAX when unknown

  std::string name_;
  std::FILE* file_ = nullptr;
  std::vector<uint8_t> memory_;  // whole stream when reading from memory
  size_t memory_pos_ = 0;
  bool from_memory_ = false;
  uint64_t max_bytes_ = UINT64_MAX;  // of a file: where it is taken to end

  std::vector<uint8_t> frame_;   // the current frame's records
  std::vector<uint8_t> stored_;  // a compressed frame as read
  format::ByteReader cursor_;    // in frame_
  uint64_t frame_time_ = 0;
  uint32_t frame_records_left_ = 0;
  uint64_t frames_ = 0;
  uint64_t offset_ = 0;
  uint32_t checksum_bytes_ = 0;  // at the end of each frame's stored bytes (format.h)
  uint64_t decoded_ = 0;         // bytes of records the frames so far decode to
  std::string problem_;
  bool done_ = false;
  std::function<void(uint64_t)> progress_;
  uint64_t progress_reported_ = 0;
};

}  // namespace vramtrace::collector

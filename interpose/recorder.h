// The recorder: the one ordered event buffer of a traced process and the thread that drains it.
//
// Hooks append records under one short lock (the order of records is the order in which
// allocations and frees took effect, which the collector needs for an exact peak); a writer
// thread swaps the buffer out and writes it as one frame to a file or the collector's socket.
// Memory is bounded: two fixed buffers; when both are full a record is dropped and counted, and
// the count is written as a Dropped record as soon as there is room again.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/format.h"
#include "interpose/options.h"

namespace vramtrace::interpose {

// Thread-local recursion guard: set while we are inside a hook or on our own threads, so that
// CUDA calls we make ourselves (cuMemGetInfo at an OOM, device queries) are not traced.
struct ReentryGuard {
  ReentryGuard();
  ~ReentryGuard();
  bool entered_first;  // false when this thread was already inside vramtrace
};

uint64_t now_ns();
// CLOCK_MONOTONIC_COARSE: a few ns, in ticks of 1 to 4 ms; for spacing work, not for records.
uint64_t coarse_now_ns();
uint32_t thread_id();

// Open the output the options name (VRAMTRACE_SOCKET, else VRAMTRACE_OUTPUT, else
// ./vramtrace.<pid>.vtrace), write the stream header and start the writer thread.
// Returns false (after one notice on stderr) when no output could be opened.
bool recorder_start(const Options& options);
bool recorder_running();

// Append records. `max_bytes` bounds what is written at begin(); a timed record puts delta_ns()
// first. ok() is false when the records were dropped.
class RecordSlot {
 public:
  explicit RecordSlot(size_t max_bytes);  // takes the lock and reserves room
  ~RecordSlot();                          // commits and releases the lock
  RecordSlot(const RecordSlot&) = delete;
  RecordSlot& operator=(const RecordSlot&) = delete;

  bool ok() const { return p_ != nullptr; }
  uint8_t* begin() const { return p_; }
  // The time since the frame's previous timed record. Reading it marks the slot timed: only then
  // does the slot move the frame's clock. The reader's clock moves only with the deltas it reads,
  // so a slot whose records carry no time (Process, Module, Notice, UserPool) must not move the
  // writer's either, or every later delta in the frame would be short by its age.
  uint64_t delta_ns() {
    timed_ = true;
    return delta_;
  }
  // `records`: how many records were written (a String record may precede a Launch).
  void commit(uint8_t* end, uint32_t records = 1) {
    end_ = end;
    records_ = records;
  }

 private:
  bool locked_ = false;
  bool timed_ = false;  // delta_ns() was read
  uint8_t* p_ = nullptr;
  uint8_t* end_ = nullptr;
  uint32_t records_ = 1;
  uint64_t delta_ = 0;
  uint64_t now_ = 0;
};

// Called after a failed allocation was recorded: it is never left waiting for the next flush.
// Without shared buffers (file mode) it writes what is buffered now, in this thread; with them
// the collector reads it after any death, and the writer is only woken.
void recorder_flush_failure();

// Called from the library's destructor: writes ProcessExit and flushes what is buffered, in the
// process that started the recorder only. Records after this are written synchronously.
void recorder_finish();

// Called in a forked child: the child must not write into its parent's stream or wait on its
// parent's writer thread, so recording stops there (the child stays silent).
void recorder_abandon_in_child();

}  // namespace vramtrace::interpose

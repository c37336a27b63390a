// The event buffers a traced process shares with the collector (launcher mode), so that what
// it recorded but had not yet sent is read by the collector after the process is gone, however
// it died (abort, segfault, _exit, SIGKILL).
//
// The library makes a memfd holding a SharedControl and, kSharedDataOffset further on, its two
// event buffers (each `capacity` bytes), maps it, and hands the descriptor to the collector with
// SCM_RIGHTS on the stream's first message (the FileHeader). The process writes the buffers as
// it always did; at each record it also publishes the buffer's committed bytes and record count
// in one 64-bit store, so that a death at any instruction leaves a consistent view: records past
// `used` are ignored. The collector reads the region only once the stream's socket is closed by
// every holder (the process is dead, or exec'd), and then with pread, never a mapping (a region
// the process shrank cannot fault it).
//
// Which buffered records were already sent: the writer marks a buffer `sending = 1 + N` before
// it writes that buffer as the stream's frame N (frames counted from 0 after the FileHeader) and
// clears the buffer, then the mark, after the write. The collector counts the complete frames it
// received: a buffer marked with N below that count arrived whole and is skipped; otherwise it
// is appended as frame N (after a partly received frame N is cut off), and an unmarked buffer
// after it. Buffers are appended in the order they began to fill (`epoch`).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramtrace::format {

inline constexpr char kSharedMagic[8] = {'V', 'T', 'S', 'H', 'B', 'U', 'F', '1'};
inline constexpr uint32_t kSharedVersion = 1;
// The buffers start one page into the region.
inline constexpr uint64_t kSharedDataOffset = 4096;

struct SharedBufferState {
  uint64_t used_count;    // committed bytes (low 32 bits) and records (high 32 bits), one store
  uint64_t base_time_ns;  // the frame's first time, set before its first record is committed
  uint64_t epoch;         // when the buffer began to fill: the order of recovery
  uint64_t sending;       // 0, or 1 + the frame number it is being written as
};

struct SharedControl {
  char magic[8];
  uint32_t version;
  uint32_t buffer_count;     // 2
  uint64_t capacity;         // bytes of each buffer
  uint64_t dropped_pending;  // events dropped and not yet counted in a Dropped record
  SharedBufferState buffers[2];
};
static_assert(sizeof(SharedControl) <= kSharedDataOffset, "the control block fits its page");

inline uint64_t pack_used_count(uint64_t used, uint64_t count) { return used | count << 32; }
inline uint64_t unpack_used(uint64_t v) { return v & 0xffffffffu; }
inline uint64_t unpack_count(uint64_t v) { return v >> 32; }

}  // namespace vramtrace::format

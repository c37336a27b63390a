// Reading back what a dead process recorded but had not sent (see common/shared_buffers.h).
//
// The collector follows each stream frame by frame as the bytes pass (StreamPosition: how many
// frames arrived whole, and where the last one ends in the trace file). When the stream has
// ended, recover_unsent() appends to the trace, as whole raw frames, what the process's shared
// buffers still hold and the stream does not: a frame cut off in the middle is cut off the file
// and written again whole, then the buffers not yet sent, in the order they began to fill, then
// the count of events dropped since the last Dropped record, each frame with its checksum when
// the stream's version has one (common/format.h). Every read of the region is
// checked: it is another process's memory, and whatever it holds, the trace stays readable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/format.h"
#include "common/shared_buffers.h"

namespace vramtrace::collector {

// Where a stream stands: the frames received whole, and the end of the last one in the file.
// Counted as the bytes pass, without decoding them.
struct StreamPosition {
  enum Piece { kFileHeader, kFileHeaderRest, kFrameHeader, kPayload };
  uint64_t written = 0;   // bytes of the stream in the output file
  uint64_t boundary = 0;  // the end of the header or of the last complete frame
  uint64_t frames = 0;    // complete frames
  Piece piece = kFileHeader;
  uint64_t need = sizeof(format::FileHeader);  // bytes still to come of the current piece
  uint8_t head[sizeof(format::FrameHeader)];   // the fixed header being received
  size_t head_got = 0;
  bool header_done = false;
  bool broken = false;   // unparseable, or a write to the file failed: no recovery
  uint32_t version = 0;  // the stream's format version: recovered frames are written in it

  void next_frame() {
    boundary = written;
    piece = kFrameHeader;
    need = sizeof(format::FrameHeader);
    head_got = 0;
  }

  void feed(const uint8_t* p, size_t n) {
    while (n > 0 && !broken) {
      size_t take = n < need ? n : static_cast<size_t>(need);
      if (piece == kFileHeader || piece == kFrameHeader) {
        std::memcpy(head + head_got, p, take);
        head_got += take;
      }
      p += take;
      n -= take;
      written += take;
      need -= take;
      if (need) continue;
      switch (piece) {
        case kFileHeader: {
          // The header says its own size (format.h: later versions may grow it).
          format::FileHeader h;
          std::memcpy(&h, head, sizeof h);
          version = h.version;
          if (h.header_bytes < sizeof h || h.header_bytes > 4096) {
            broken = true;
            return;
          }
          header_done = h.header_bytes == sizeof h;
          if (header_done) {
            next_frame();
          } else {
            piece = kFileHeaderRest;
            need = h.header_bytes - sizeof h;
          }
          break;
        }
        case kFileHeaderRest:
          header_done = true;
          next_frame();
          break;
        case kFrameHeader: {
          format::FrameHeader h;
          std::memcpy(&h, head, sizeof h);
          if (h.stored_bytes > format::kMaxFrameBytes) {
            broken = true;
            return;
          }
          if (h.stored_bytes == 0) {
            ++frames;
            next_frame();
          } else {
            piece = kPayload;
            need = h.stored_bytes;
          }
          break;
        }
        case kPayload:
          ++frames;
          next_frame();
          break;
      }
    }
  }
};

// Appends to `out` (the trace file, `pos` its stream so far) what the region `shared` (a file
// descriptor: a memfd, or any file in tests) holds and the stream lacks. Returns the frames
// appended. Only for a stream that has ended: the region must no longer change.
int recover_unsent(int shared, int out, const StreamPosition& pos);

// write(2) until all is written; false on an error.
bool write_all_fd(int fd, const void* data, size_t n);

}  // namespace vramtrace::collector

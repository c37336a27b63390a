// The one walk over a trace's frames by their headers (common/format.h): where a trace being
// written ends for a reader (run_files.cpp's whole_frames_end()), and the tests, tools and
// benchmarks that take a stream apart frame by frame. The decoding of a frame's records is the
// trace reader's (trace_reader.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/format.h"

namespace vramtrace::collector {

// A frame of a stream: where its header is, and the header.
struct FrameAt {
  uint64_t offset = 0;
  format::FrameHeader header{};
  uint64_t payload() const { return offset + sizeof header; }
  uint64_t end() const { return payload() + header.stored_bytes; }
};

// Where a walk stopped: the end of the last frame visited (where it started, when none was);
// `damaged` when a header there is not one (its payload larger than any frame's).
struct FramesEnd {
  uint64_t end = 0;
  bool damaged = false;
};

// Walks the whole frames of a stream of `size` bytes from `at` (the end of its file header):
// read_header(offset, FrameHeader*) reads the header at `offset`, false when it is not all
// there; visit(const FrameAt&) is called for each frame whose payload is all there, in order,
// and stops the walk by returning false (that frame is not counted as visited). A frame cut
// short ends the walk: it is still arriving, or the writer was cut off.
template <class ReadHeader, class Visit>
FramesEnd walk_frames(uint64_t at, uint64_t size, ReadHeader&& read_header, Visit&& visit) {
  FramesEnd out{at, false};
  for (;;) {
    FrameAt f;
    f.offset = out.end;
    if (!read_header(f.offset, &f.header)) break;
    if (f.header.stored_bytes > format::kMaxFrameBytes) {
      out.damaged = true;
      break;
    }
    if (f.end() > size || !visit(f)) break;
    out.end = f.end();
  }
  return out;
}

// The same over a stream in memory that starts with its FileHeader: visit(const FrameAt&,
// const uint8_t* payload).
template <class Visit>
FramesEnd walk_frames(const uint8_t* data, size_t size, Visit&& visit) {
  auto read_header = [data, size](uint64_t at, format::FrameHeader* h) {
    if (at + sizeof *h > size) return false;
    std::memcpy(h, data + at, sizeof *h);
    return true;
  };
  return walk_frames(sizeof(format::FileHeader), size, read_header,
                     [&visit, data](const FrameAt& f) { return visit(f, data + f.payload()); });
}

}  // namespace vramtrace::collector

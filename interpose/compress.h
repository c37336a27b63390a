// zstd compression of trace frames for the preloaded library's writer thread.
//
// libvramtrace.so must need nothing but libc (readelf -d), so zstd is not linked: libzstd.so.1
// is dlopen'd once when the recorder starts (VRAMTRACE_ZSTD_LIB names another file), and when it
// is absent, too old, or VRAMTRACE_COMPRESS=off, frames are written raw, as before. The reader
// (collector/ingest/trace_reader.cpp) decodes either, frame by frame. Only the writer thread
// compresses: the context and the output buffer are made there, and hooks never wait for
// compression. Also compiled into the unit tests, which compare compressed and raw streams event by
// event.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramtrace::interpose {

class FrameCompressor {
 public:
  static constexpr int kLevel = 1;

  // Loads libzstd unless `mode` (VRAMTRACE_COMPRESS) is off/0/none/raw. `library`: the file to
  // dlopen, null or empty for "libzstd.so.1". Returns whether compression is available.
  bool load(const char* mode, const char* library);
  bool loaded() const { return compress_ != nullptr; }

  // Writer thread, before its first frame: the context, and room for frames of up to
  // `max_raw_bytes`. False (frames stay raw) when either cannot be made.
  bool prepare(size_t max_raw_bytes);
  bool ready() const { return cctx_ != nullptr && out_ != nullptr; }

  // Compresses one frame's records, with zstd's content checksum. Returns the compressed size
  // (the bytes are at output()), or
  // 0 when the frame should be written raw: not ready, too large, an error, or no smaller.
  size_t compress(const uint8_t* src, size_t n);
  const uint8_t* output() const { return out_; }

  // Frees the context and the output buffer (tests; the library keeps them to its end).
  void release();

 private:
  using CreateFn = void* (*)();
  using FreeFn = size_t (*)(void*);
  using BoundFn = size_t (*)(size_t);
  using CompressFn = size_t (*)(void*, void*, size_t, const void*, size_t);
  using SetParameterFn = size_t (*)(void*, int, int);
  using IsErrorFn = unsigned (*)(size_t);
  using ContentSizeFn = unsigned long long (*)(const void*, size_t);

  CreateFn create_ = nullptr;
  FreeFn free_ = nullptr;
  BoundFn bound_ = nullptr;
  CompressFn compress_ = nullptr;
  SetParameterFn set_parameter_ = nullptr;
  IsErrorFn is_error_ = nullptr;
  ContentSizeFn content_size_ = nullptr;
  void* cctx_ = nullptr;
  uint8_t* out_ = nullptr;
  size_t out_capacity_ = 0;
  size_t max_raw_ = 0;
};

}  // namespace vramtrace::interpose

// zstd compression of trace frames, through a dlopen'd libzstd (see compress.h).
#include "interpose/compress.h"

#include <dlfcn.h>
#include <string.h>
#include <sys/mman.h>

namespace vramtrace::interpose {

namespace {
// ZSTD_versionNumber() of the oldest libzstd we use: 1.4.0 (stable ZSTD_compress2 and
// ZSTD_CCtx_setParameter, with the content size in every frame header, which the reader
// requires).
constexpr unsigned kMinVersion = 10400;
// zstd.h's ZSTD_cParameter values (stable since 1.4.0; zstd.h is not included: the library is
// dlopen'd).
constexpr int kLevelParameter = 100;     // ZSTD_c_compressionLevel
constexpr int kChecksumParameter = 201;  // ZSTD_c_checksumFlag
}  // namespace

bool FrameCompressor::load(const char* mode, const char* library) {
  if (mode &&
      (!strcmp(mode, "off") || !strcmp(mode, "0") || !strcmp(mode, "none") || !strcmp(mode, "raw")))
    return false;
  // RTLD_LOCAL: its symbols stay out of the target's global scope.
  void* h = dlopen(library && *library ? library : "libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  auto version = reinterpret_cast<unsigned (*)()>(dlsym(h, "ZSTD_versionNumber"));
  create_ = reinterpret_cast<CreateFn>(dlsym(h, "ZSTD_createCCtx"));
  free_ = reinterpret_cast<FreeFn>(dlsym(h, "ZSTD_freeCCtx"));
  bound_ = reinterpret_cast<BoundFn>(dlsym(h, "ZSTD_compressBound"));
  is_error_ = reinterpret_cast<IsErrorFn>(dlsym(h, "ZSTD_isError"));
  content_size_ = reinterpret_cast<ContentSizeFn>(dlsym(h, "ZSTD_getFrameContentSize"));
  set_parameter_ = reinterpret_cast<SetParameterFn>(dlsym(h, "ZSTD_CCtx_setParameter"));
  auto compress = reinterpret_cast<CompressFn>(dlsym(h, "ZSTD_compress2"));
  if (!version || version() < kMinVersion || !create_ || !free_ || !bound_ || !is_error_ ||
      !content_size_ || !set_parameter_ || !compress) {
    dlclose(h);
    create_ = nullptr;
    return false;
  }
  compress_ = compress;
  return true;
}

bool FrameCompressor::prepare(size_t max_raw_bytes) {
  if (!loaded() || ready()) return ready();
  size_t cap = bound_(max_raw_bytes);
  if (is_error_(cap) || cap == 0) return false;
  void* m = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  cctx_ = create_();
  // zstd's content checksum in every frame: the reader's decoder checks what it decoded.
  if (cctx_ && (is_error_(set_parameter_(cctx_, kLevelParameter, kLevel)) ||
                is_error_(set_parameter_(cctx_, kChecksumParameter, 1)))) {
    free_(cctx_);
    cctx_ = nullptr;
  }
  if (!cctx_) {
    munmap(m, cap);
    return false;
  }
  out_ = static_cast<uint8_t*>(m);
  out_capacity_ = cap;
  max_raw_ = max_raw_bytes;
  return true;
}

size_t FrameCompressor::compress(const uint8_t* src, size_t n) {
  if (!ready() || n == 0 || n > max_raw_) return 0;
  size_t got = compress_(cctx_, out_, out_capacity_, src, n);
  if (is_error_(got) || got >= n) return 0;
  // The reader checks the size a frame says it decodes to before it allocates: make sure this
  // libzstd wrote it.
  if (content_size_(out_, got) != n) return 0;
  return got;
}

void FrameCompressor::release() {
  if (cctx_) free_(cctx_);
  if (out_) munmap(out_, out_capacity_);
  cctx_ = nullptr;
  out_ = nullptr;
  out_capacity_ = max_raw_ = 0;
}

}  // namespace vramtrace::interpose

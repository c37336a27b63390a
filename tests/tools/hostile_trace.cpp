// Writes small traces made to exhaust a reader, as a hostile or broken writer could, for the
// reliability test of the readers' bounds (tests/reliability/hostile_test.py) and for measuring
// them by hand (/usr/bin/time -v vramtrace report FILE):
//   vt_hostile_trace ranges OUT FRAMES   zstd frames of 64 MiB of RangePush records, never popped
//   vt_hostile_trace live OUT COUNT      COUNT allocations never freed, in 1 MiB zstd frames
//   vt_hostile_trace dropped OUT FRAMES  zstd frames of 64 MiB of Dropped records
// Each is a well-formed stream (checksums right): only what it asks a reader to hold and do is
// hostile.
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/format.h"

using namespace vramtrace::format;

namespace {

struct Writer {
  FILE* f = nullptr;
  std::vector<uint8_t> frame, packed;
  uint32_t records = 0;
  uint64_t frames = 0;  // written
  ZSTD_CCtx* cctx = ZSTD_createCCtx();

  explicit Writer(const char* path) : f(std::fopen(path, "wb")) {
    if (!f) {
      std::perror(path);
      std::exit(1);
    }
    FileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof h.magic);
    h.version = kFormatVersion;
    h.header_bytes = sizeof h;
    std::fwrite(&h, sizeof h, 1, f);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  }
  ~Writer() {
    flush();
    ZSTD_freeCCtx(cctx);
    if (std::fclose(f) != 0) std::exit(1);
  }
  // The frame so far, compressed as the library's writer does it, `times` times over (frames of
  // the same records are the same bytes: made once).
  void flush(uint64_t times = 1) {
    if (frame.empty()) return;
    packed.resize(ZSTD_compressBound(frame.size()));
    const size_t n = ZSTD_compress2(cctx, packed.data(), packed.size(), frame.data(), frame.size());
    if (ZSTD_isError(n)) std::exit(1);
    FrameHeader h{};
    h.codec = static_cast<uint8_t>(Codec::Zstd);
    h.raw_bytes = static_cast<uint32_t>(frame.size());
    h.record_count = records;
    const uint32_t sum = seal_frame(h, packed.data(), n);
    for (uint64_t i = 0; i < times; ++i) {
      std::fwrite(&h, sizeof h, 1, f);
      std::fwrite(packed.data(), 1, n, f);
      std::fwrite(&sum, sizeof sum, 1, f);
    }
    frame.clear();
    records = 0;
    frames += times;
  }
  // `n` frames of `r` alone, each as full as the next record might still fit.
  template <typename R>
  void fill(const R& r, uint64_t n) {
    flush();
    while (frame.size() + max_bytes(r) <= kMaxFrameBytes) add(r, SIZE_MAX);
    flush(n);
  }
  // A record of common/records.h, at the frame's base time; the frame is written once the next
  // record might take it past `frame_bytes`.
  template <typename R>
  void add(const R& r, size_t frame_bytes = kMaxFrameBytes) {
    const size_t at = frame.size();
    frame.resize(at + max_bytes(r));
    uint8_t* end;
    if constexpr (R::kTimed)
      end = put(frame.data() + at, r, 0);
    else
      end = put(frame.data() + at, r);
    frame.resize(static_cast<size_t>(end - frame.data()));
    ++records;
    if (frame.size() + max_bytes(r) > frame_bytes) flush();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ranges|live|dropped OUT N\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[1];
  const uint64_t n = std::strtoull(argv[3], nullptr, 10);
  Writer w(argv[2]);
  w.add(rec::Process{100, 1, 1'700'000'000'000'000'000ull, 0, "hostile", "/bin/hostile", "hostile",
                     "RANK=0\n"});
  w.add(rec::ContextCreate{0x1000, 0, 80ull << 30, "Test GPU", std::string(16, '\1')});
  w.add(rec::String{1, "step"});  // the ranges' name
  w.flush();
  if (kind == "ranges") {
    w.fill(rec::RangePush{1, 1}, n);
  } else if (kind == "live") {
    for (uint64_t i = 0; i < n; ++i)
      w.add(rec::Alloc{Api::cuMemAlloc, 0, 0x7f0000000000 + i * 512, 512, 0, 1}, 1u << 20);
  } else if (kind == "dropped") {
    w.fill(rec::Dropped{1}, n);
  } else {
    std::fprintf(stderr, "%s: unknown kind %s\n", argv[0], argv[1]);
    return 2;
  }
  return 0;
}

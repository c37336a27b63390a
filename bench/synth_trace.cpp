// Writes a synthetic vramtrace trace of N events (a training-like rhythm: persistent weights,
// then iterations of 6 activation allocations, 20 kernel launches and 6 frees), for benchmarks
// of the collector and the HTML report at 1, 10 and 100 million events.
//   vt_synth_trace OUT.vtrace EVENTS [zstd]
// With `zstd`, every frame is compressed as the library's writer does it (level 1), to measure
// the report on compressed traces; the perfectly regular times here compress far better than a
// real process's (bench/writer.sh has those).
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/format.h"
#include "common/records.h"

using namespace vramtrace::format;

namespace {

struct Writer {
  FILE* f;
  bool zstd = false;
  ZSTD_CCtx* cctx = nullptr;  // level 1 with zstd's content checksum, as the library writes
  std::vector<uint8_t> frame, packed;
  uint32_t records = 0;
  uint64_t base = 0, last = 0, written = 0;

  void flush() {
    if (frame.empty()) return;
    FrameHeader h{};
    h.stored_bytes = h.raw_bytes = static_cast<uint32_t>(frame.size());
    h.record_count = records;
    h.base_time_ns = base;
    const uint8_t* payload = frame.data();
    if (zstd) {
      packed.resize(ZSTD_compressBound(frame.size()));
      size_t n = ZSTD_compress2(cctx, packed.data(), packed.size(), frame.data(), frame.size());
      if (!ZSTD_isError(n) && n < frame.size()) {
        h.codec = static_cast<uint8_t>(Codec::Zstd);
        h.stored_bytes = static_cast<uint32_t>(n);
        payload = packed.data();
      }
    }
    const uint32_t n = h.stored_bytes;
    const uint32_t sum = seal_frame(h, payload, n);  // format version 2: a checksum per frame
    fwrite(&h, sizeof h, 1, f);
    fwrite(payload, 1, n, f);
    fwrite(&sum, sizeof sum, 1, f);
    frame.clear();
    records = 0;
    base = last;
  }
  // A record of common/records.h; a timed one at `now`.
  template <typename R>
  void add(const R& r, uint64_t now = 0) {
    size_t at = frame.size();
    frame.resize(at + max_bytes(r));
    uint8_t* end;
    if constexpr (R::kTimed) {
      end = put(frame.data() + at, r, now - last);
      last = now;
    } else {
      end = put(frame.data() + at, r);
    }
    frame.resize(static_cast<size_t>(end - frame.data()));
    ++records;
    ++written;
    if (frame.size() > (1u << 20)) flush();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::strcmp(argv[3], "zstd") == 0)) {
    std::fprintf(stderr, "usage: %s OUT.vtrace EVENTS [zstd]\n", argv[0]);
    return 2;
  }
  uint64_t target = std::strtoull(argv[2], nullptr, 10);
  Writer w;
  w.zstd = argc == 4;
  if (w.zstd) {
    w.cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_checksumFlag, 1);
  }
  w.f = std::fopen(argv[1], "wb");
  if (!w.f) return 1;
  FileHeader fh{};
  std::memcpy(fh.magic, kMagic, sizeof fh.magic);
  fh.version = kFormatVersion;
  fh.header_bytes = sizeof fh;
  fwrite(&fh, sizeof fh, 1, w.f);

  uint64_t t = 1'000'000'000;
  w.base = w.last = t;
  const std::string host = "synth", exe = "/bin/synth", cmd = "synth";
  w.add(rec::Process{4242, 1, 1'700'000'000'000'000'000ull, t, host, exe, cmd, ""});
  const std::string gpu = "synthetic GPU";
  w.add(rec::ContextCreate{0x1000, 0, 80ull << 30, gpu, "0123456789abcdef"}, t += 1000);
  for (uint32_t k = 1; k <= 8; ++k) {
    std::string name = "_Z6kernelILi" + std::to_string(k) + "EEvPf";
    w.add(rec::String{k, name});
  }
  auto alloc = [&](uint64_t addr, uint64_t bytes, Api api) {
    w.add(rec::Alloc{api, 0, addr, bytes, 0x5000, 77}, t += 700);
  };
  auto free_ = [&](uint64_t addr, Api api) {
    w.add(rec::Free{api, 0, addr, 0x5000, 77}, t += 300);
  };
  for (uint64_t i = 0; i < 1000; ++i)
    alloc(0x7f0000000000ull + i * (64 << 20), 16 << 20, Api::cuMemAlloc);
  for (uint64_t it = 0; w.written < target; ++it) {
    for (uint64_t a = 0; a < 6; ++a)
      alloc(0x7e0000000000ull + a * (1 << 28), (32 + it % 7) << 20, Api::cuMemAllocAsync);
    for (uint32_t k = 0; k < 20; ++k)
      w.add(rec::Launch{Api::cuLaunchKernel, 0, 0x5000, 1 + k % 8}, t += 5000);
    for (uint64_t a = 0; a < 6; ++a) free_(0x7e0000000000ull + a * (1 << 28), Api::cuMemFreeAsync);
  }
  w.add(rec::ProcessExit{w.written + 1, 0}, t += 1000);
  w.flush();
  std::fclose(w.f);
  std::printf("%llu events\n", static_cast<unsigned long long>(w.written));
  return 0;
}

// Writes the TraceBuilder part of the trace_reader seed corpus (tests/fuzz/corpus/trace_reader/
// tb-*.vtrace): small traces that reach every record type, a zstd frame, several frames, and a
// trace cut off inside a frame. Usage: vt_fuzz_make_seeds DIR
#include <zstd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "collector/ingest/frames.h"
#include "unit/trace_builder.h"

using vt_test::Api;
using vt_test::TraceBuilder;

namespace {

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& b) {
  std::ofstream out(dir + "/tb-" + name + ".vtrace", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The same stream with every frame's payload zstd-compressed.
std::vector<uint8_t> compress_frames(const std::vector<uint8_t>& raw) {
  using vramtrace::format::FrameHeader;
  std::vector<uint8_t> out(raw.begin(), raw.begin() + sizeof(vramtrace::format::FileHeader));
  const uint32_t version = vt_test::stream_version(raw);
  auto compress = [&out, version](const vramtrace::collector::FrameAt& f, const uint8_t* payload) {
    FrameHeader h = f.header;
    std::vector<uint8_t> z(ZSTD_compressBound(h.raw_bytes));
    // As the library's writer compresses: with zstd's content checksum.
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    size_t n = ZSTD_compress2(cctx, z.data(), z.size(), payload, h.raw_bytes);
    ZSTD_freeCCtx(cctx);
    h.codec = static_cast<uint8_t>(vramtrace::format::Codec::Zstd);
    vt_test::append_frame(out, h, z.data(), n, version);
    return true;
  };
  vramtrace::collector::walk_frames(raw.data(), raw.size(), compress);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];

  TraceBuilder basic;
  basic.context(0, 80ull << 30, "Test GPU")
      .kernel(1, "_Z4fillPffi")
      .launch(1)
      .alloc(0x1000, 4 << 20)
      .alloc(0x2000, 8 << 20)
      .free(0x1000)
      .alloc(0x3000, 1 << 20)
      .failed(1ull << 40)
      .meminfo(1 << 20, 80ull << 30)
      .free(0x2000)
      .exit_clean();
  auto basic_bytes = basic.bytes();
  write(dir, "basic", basic_bytes);
  write(dir, "basic-zstd", compress_frames(basic_bytes));

  TraceBuilder apis;
  apis.context(0, 1ull << 30)
      .context(1, 2ull << 30, "Second GPU")
      .alloc(0x10, 4096, Api::cuMemAllocAsync)
      .alloc(0x20, 4096, Api::cuMemAllocManaged, 1)
      .alloc(0x30, 4096, Api::cuArrayCreate)
      .alloc(0x40, 65536, Api::cuMemHostAlloc)
      .flush()
      .vmm_create(7, 2 << 20)
      .vmm_map(0x7000000, 2 << 20, 7)
      .vmm_release(7)
      .vmm_unmap(0x7000000, 2 << 20)
      .free(0x10, Api::cuMemFreeAsync)
      .free(0x40, Api::cuMemFreeHost)
      .free(0x30, Api::cuArrayDestroy)
      .flush()
      .failed(512, 1)
      .exit_clean();
  write(dir, "apis", apis.bytes());

  // Launches off (a Settings record), with a field from a later library after the known one.
  TraceBuilder launches_off;
  launches_off.settings({0, 3})
      .context(0, 1ull << 30)
      .alloc(0x1000, 2 << 20)
      .failed(1ull << 40)
      .meminfo(1 << 20, 1ull << 30)
      .free(0x1000)
      .exit_clean();
  write(dir, "launches-off", launches_off.bytes());

  // A native loop of one kernel per iteration that runs out and exits with its own code: the
  // launch rhythm of gap 1 and an ExitStatus record before ProcessExit.
  TraceBuilder exit_status;
  exit_status.context(0, 256ull << 20).kernel(1, "_Z4stepPfm");
  for (uint64_t i = 0; i < 4; ++i)
    exit_status.alloc(0x1000, 16 << 20).launch(1).free(0x1000).alloc(0x100000 * (i + 1), 64 << 20);
  exit_status.failed(64 << 20).meminfo(0, 256ull << 20).exit_with(3);
  write(dir, "exit-status", exit_status.bytes());

  TraceBuilder cut;
  cut.context(0, 1ull << 30)
      .alloc(0x1000, 1 << 20)
      .flush()
      .alloc(0x2000, 2 << 20)
      .alloc(0x3000, 3 << 20);
  auto cut_bytes = cut.bytes();
  cut_bytes.resize(cut_bytes.size() - 5);  // cut off inside the last frame, as by SIGKILL
  write(dir, "cut", cut_bytes);

  TraceBuilder many(200, "otherhost");
  many.context(0, 1ull << 30).step(1'000'000);
  for (uint64_t i = 0; i < 64; ++i) {
    many.alloc(0x100000 + i * 0x1000, (i + 1) * 4096);
    if (i % 3 == 0) many.free(0x100000 + (i / 2) * 0x1000);
    if (i % 16 == 15) many.flush();
  }
  write(dir, "many-frames", many.bytes());
  return 0;
}

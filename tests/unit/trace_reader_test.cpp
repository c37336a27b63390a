// Unit tests of the trace reader (collector/ingest/trace_reader.h) on damaged traces: a frame
// header that claims more than the trace holds is not allocated for, and a device ordinal of
// 4096 or more is a corrupt record. Each case reproduces a bug found by fuzzing and failed
// before its fix.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::Api;
using vt_test::TraceBuilder;

namespace {
// Peak resident set, in KiB, of a child process that reads `bytes` as a trace to its end.
long child_peak_kb(const std::vector<uint8_t>& bytes) {
  pid_t pid = fork();
  if (pid == 0) {
    try {
      auto r = collector::TraceReader::from_bytes(bytes);
      while (r->next()) {}
    } catch (...) {}
    _exit(0);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(wait4(pid, &status, 0, &usage) == pid);
  REQUIRE(WIFEXITED(status));
  return usage.ru_maxrss;
}
}  // namespace

TEST_CASE("a frame header claiming 64 MiB in a short trace does not allocate 64 MiB") {
  // Found by fuzzing (peak RSS of the trace fuzzer): 40 bytes of input made the reader zero a
  // 64 MiB buffer before finding that the frame is not there.
  std::vector<uint8_t> t = TraceBuilder().context(0, 1 << 30).bytes();
  const std::vector<uint8_t> good = t;
  format::FrameHeader h{};
  h.stored_bytes = h.raw_bytes = format::kMaxFrameBytes;
  h.record_count = 1;
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  t.insert(t.end(), p, p + sizeof h);
  t.insert(t.end(), 16, 0x42);
  auto r = collector::TraceReader::from_bytes(t);
  while (r->next()) {}
  REQUIRE(r->problem() == "trace ends inside a frame at byte " + std::to_string(good.size()) +
                              " (16 of 67108864 bytes; the process was cut off while writing)");
  REQUIRE(child_peak_kb(t) < child_peak_kb(good) + 16 * 1024);

  // A zstd frame whose header claims 64 MiB but whose data says otherwise.
  std::vector<uint8_t> z = TraceBuilder().bytes();
  h.codec = static_cast<uint8_t>(format::Codec::Zstd);
  h.stored_bytes = 16;
  z.insert(z.end(), p, p + sizeof h);
  const uint8_t zstd_frame[16] = {0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x01, 0x09, 0x00, 0x00, 0x41};
  z.insert(z.end(), zstd_frame, zstd_frame + 16);
  auto rz = collector::TraceReader::from_bytes(z);
  while (rz->next()) {}
  REQUIRE_THAT(rz->problem(), Catch::StartsWith("corrupt compressed frame at byte"));
  REQUIRE(child_peak_kb(z) < child_peak_kb(good) + 16 * 1024);
}

TEST_CASE("a device ordinal of 4096 or more is a corrupt record, not one more device") {
  // Before: each distinct ordinal was a device of the model and the report: a 0.5 MB trace of
  // 40000 ordinals gave a 150 MB report.json, 1.4 GiB and (before run_device was indexed) 1 min.
  TraceBuilder t;
  t.context(0, 1ull << 30).alloc(0x1000, 4096, Api::cuMemAlloc, 4095);
  t.alloc(0x2000, 4096, Api::cuMemAlloc, 4096).alloc(0x3000, 4096);
  auto r = collector::TraceReader::from_bytes(t.bytes());
  std::vector<uint32_t> devices;
  while (auto e = r->next())
    if (e->type == format::RecordType::Alloc) devices.push_back(e->alloc.device);
  REQUIRE(devices == std::vector<uint32_t>{4095});
  REQUIRE(r->problem() == "corrupt record in frame 1 (type 4)");
}

// Unit tests of the trace reader (collector/ingest/trace_reader.h) on damaged traces: a frame
// header that claims more than the trace holds is not allocated for, and a device ordinal of
// 4096 or more is a corrupt record. Each case reproduces a bug found by fuzzing and failed
// before its fix.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zstd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "collector/ingest/frames.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "common/format.h"
#include "interpose/compress.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::Api;
using vt_test::TraceBuilder;
namespace rec = format::rec;

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

  // A zstd frame whose header claims 64 MiB but whose data says otherwise (in a version 1
  // stream: no checksum comes first to refuse it).
  std::vector<uint8_t> z = TraceBuilder().format_version(1).bytes();
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

namespace {
// The records a reader gives of `bytes`, and its problem.
struct ReadBack {
  std::vector<std::string> records;
  std::string problem;
};
ReadBack read_back(const std::vector<uint8_t>& bytes) {
  ReadBack out;
  auto r = collector::TraceReader::from_bytes(bytes);
  while (auto e = r->next())
    out.records.push_back(
        std::string(format::record_name(e->type)) + "@" + std::to_string(e->time_ns) +
        (e->type == format::RecordType::Alloc ? ":" + std::to_string(e->alloc.bytes)
                                              : std::string()));
  out.problem = r->problem();
  return out;
}
}  // namespace

TEST_CASE("every 1-bit flip in a checksummed frame makes it a damaged frame, raw or zstd") {
  // Before the checksum a flipped bit in a record gave a complete report with another peak.
  TraceBuilder b;
  b.context(0, 1 << 30).alloc(0x1000, 4 << 20).flush();
  for (int i = 0; i < 40; ++i) b.alloc(0x2000 + i * 0x1000, 8 << 20);
  const std::vector<uint8_t> raw = b.bytes();
  const ReadBack whole = read_back(raw);
  REQUIRE(whole.problem.empty());
  REQUIRE(whole.records.size() == 43);  // Process, ContextCreate, 41 Allocs
  const std::vector<std::string> first(whole.records.begin(), whole.records.begin() + 3);

  // The same trace with its second frame compressed as the library's writer does it; where the
  // second frame begins in each.
  interpose::FrameCompressor z;
  REQUIRE(z.load(nullptr, nullptr));
  REQUIRE(z.prepare(1 << 20));
  std::vector<uint8_t> packed(raw.begin(), raw.begin() + sizeof(format::FileHeader));
  size_t raw_second = 0, packed_second = 0;
  collector::walk_frames(raw.data(), raw.size(),
                         [&](const collector::FrameAt& f, const uint8_t* payload) {
                           format::FrameHeader h = f.header;
                           const uint8_t* src = payload;
                           size_t n = h.raw_bytes;
                           if (f.offset > sizeof(format::FileHeader)) {
                             raw_second = f.offset;
                             packed_second = packed.size();
                             n = z.compress(payload, h.raw_bytes);
                             REQUIRE(n > 0);
                             // zstd's content checksum is in it (Frame_Header_Descriptor bit 2).
                             REQUIRE((z.output()[4] & 0x04) != 0);
                             h.codec = static_cast<uint8_t>(format::Codec::Zstd);
                             src = z.output();
                           }
                           vt_test::append_frame(packed, h, src, n, format::kFormatVersion);
                           return true;
                         });
  z.release();
  REQUIRE(raw_second > 0);
  REQUIRE(read_back(packed).records == whole.records);

  // A bit of a record's bytes: the checksum does not match (version 1 read another figure).
  std::vector<uint8_t> t = raw;
  t[t.size() - 10] ^= 0x10;
  REQUIRE(read_back(t).problem ==
          "damaged frame at byte " + std::to_string(raw_second) + ": its checksum does not match");
  REQUIRE(read_back(t).records == first);

  // Every bit of the second frame, header, records and checksum, in both.
  using Stream = std::pair<const std::vector<uint8_t>*, size_t>;
  for (const auto& [stream, begin] : {Stream{&raw, raw_second}, Stream{&packed, packed_second}}) {
    size_t flips = 0;
    for (size_t byte = begin; byte < stream->size(); ++byte)
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> f = *stream;
        f[byte] ^= static_cast<uint8_t>(1u << bit);
        const ReadBack got = read_back(f);
        INFO("byte " << byte << " bit " << bit << ": " << got.problem);
        REQUIRE(got.records == first);  // the first frame's records, none of the damaged one
        REQUIRE_FALSE(got.problem.empty());
        ++flips;
      }
    REQUIRE(flips == 8 * (stream->size() - begin));
  }
}

TEST_CASE("a version 1 trace, without checksums, is still read, and a later version refused") {
  TraceBuilder b;
  b.format_version(1).context(0, 1 << 30).alloc(0x1000, 4 << 20).flush().alloc(0x2000, 1 << 20);
  const ReadBack v1 = read_back(b.bytes());
  REQUIRE(v1.problem.empty());
  REQUIRE(v1.records.size() == 4);
  std::vector<uint8_t> v3 = TraceBuilder().bytes();
  const uint32_t three = 3;
  std::memcpy(v3.data() + 8, &three, sizeof three);
  REQUIRE_THROWS_WITH(collector::TraceReader::from_bytes(v3),
                      "<memory>: trace format version 3, this vramtrace reads versions 1 to 2");
}

TEST_CASE("a trace decodes to at most 256 MiB and 256 bytes a byte of it, then stops as damaged") {
  // 200 zstd frames of 64 MiB of Dropped records (1.2 MB) took 48 s: 6.7 billion records.
  std::vector<uint8_t> t = TraceBuilder().context(0, 1 << 30).bytes();
  std::vector<uint8_t> records;
  uint32_t count = 0;
  for (; records.size() + 2 <= format::kMaxFrameBytes; ++count) {
    records.push_back(static_cast<uint8_t>(format::RecordType::Dropped));
    records.push_back(1);
  }
  std::vector<uint8_t> z(ZSTD_compressBound(records.size()));
  const size_t n = ZSTD_compress(z.data(), z.size(), records.data(), records.size(), 1);
  REQUIRE(!ZSTD_isError(n));
  format::FrameHeader h{};
  h.codec = static_cast<uint8_t>(format::Codec::Zstd);
  h.raw_bytes = static_cast<uint32_t>(records.size());
  h.record_count = count;
  std::vector<size_t> at;
  for (int i = 0; i < 8; ++i) {
    at.push_back(t.size());
    vt_test::append_frame(t, h, z.data(), n, format::kFormatVersion);
  }
  auto r = collector::TraceReader::from_bytes(t);
  uint64_t dropped = 0;
  while (auto e = r->next())
    if (e->type == format::RecordType::Dropped) dropped += e->dropped.count;
  // Four frames of 64 MiB fit the 256 MiB (and 256 bytes for each of the few KB read), the
  // fifth does not.
  REQUIRE(dropped == 4ull * count);
  const uint64_t file_bytes = at[4] + sizeof h + n + format::kFrameChecksumBytes;
  REQUIRE(r->problem() == "frame 6 at byte " + std::to_string(at[4]) +
                              " would decode the trace to " +
                              std::to_string(5ull * records.size() + (at[0] - 16 - 28)) +
                              " bytes of records, more than the " +
                              std::to_string((256ull << 20) + 256 * file_bytes) + " that " +
                              std::to_string(file_bytes) +
                              " bytes of trace may decode to (256 MiB, and 256 a byte): the rest "
                              "is not read");
}

namespace {
// Peak resident set, in KiB, of a child process that makes the model of `bytes`.
long child_model_peak_kb(const std::vector<uint8_t>& bytes) {
  pid_t pid = fork();
  if (pid == 0) {
    try {
      std::vector<std::unique_ptr<collector::TraceReader>> readers;
      readers.push_back(collector::TraceReader::from_bytes(bytes));
      collector::Run run = collector::model_of(std::move(readers));
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

TEST_CASE(
    "NVTX ranges nested past 1024 on a thread are counted, not kept, and the report says so") {
  // 136 KB of zstd frames of RangePush records took 2.1 GB, then std::bad_alloc.
  TraceBuilder b;
  b.context(0, 1ull << 30).kernel(1, "step").kernel(2, "inner");
  b.add(rec::RangePush{7, 1});
  for (int i = 0; i < 1029; ++i) b.add(rec::RangePush{7, 2});
  b.alloc(0x1000, 4096);
  for (int i = 0; i < 1030; ++i) b.add(rec::RangePop{7});
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(b.bytes()));
  collector::Run run = collector::model_of(std::move(readers));
  REQUIRE(run.problems ==
          std::vector<std::string>{"<memory>: NVTX ranges nested more than 1024 deep on thread 7: "
                                   "the deeper ones are counted, not kept"});
  const collector::ProcessModel& p = run.processes[0];
  REQUIRE(p.problem ==
          "NVTX ranges nested more than 1024 deep on thread 7: the deeper ones are "
          "counted, not kept");
  REQUIRE(p.phases_total == 1024);  // the pops of the 6 not kept matched them, not kept ones
  REQUIRE(p.range_stats.at(1).count == 1);
  REQUIRE(p.range_stats.at(2).count == 1023);
  REQUIRE(p.live.at(0x1000).phase == 2);

  // What 4,194,305 pushes never popped hold: no more than as many pushed and popped (before:
  // 128 MiB more).
  TraceBuilder deep, flat;
  for (uint32_t i = 0; i <= (1u << 22); ++i) {
    deep.add(rec::RangePush{7, 1});
    flat.add(rec::RangePush{7, 1});
    flat.add(rec::RangePop{7});
    if (i % 100000 == 0) deep.flush(), flat.flush();
  }
  const std::vector<uint8_t> d = deep.bytes(), f = flat.bytes();
  REQUIRE(d.size() < f.size());
  REQUIRE(child_model_peak_kb(d) < child_model_peak_kb(f) + 16 * 1024);
}

// Unit tests of the library's frame compression (interpose/compress.cpp): every frame of traces
// the library wrote (the fuzz corpus) and of a large built one, compressed by the writer's own
// code, reads back as exactly the same events, field by field, as the raw stream; and each case
// that must leave a frame raw does.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "collector/ingest/frames.h"
#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "common/record_text.h"
#include "interpose/compress.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using interpose::FrameCompressor;

namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Recoded {
  std::vector<uint8_t> bytes;
  size_t zstd_frames = 0, raw_frames = 0;
};

// The stream with every whole frame's payload passed through `z` as the writer thread does it
// (compressed when smaller, else kept raw); a cut-off tail is kept as it is.
Recoded recode(const std::vector<uint8_t>& in, FrameCompressor& z) {
  Recoded out;
  out.bytes.assign(in.begin(), in.begin() + sizeof(format::FileHeader));
  auto recode_frame = [&](const collector::FrameAt& f, const uint8_t* payload) {
    if (f.header.codec != static_cast<uint8_t>(format::Codec::Raw)) return false;
    format::FrameHeader h = f.header;
    size_t n = z.compress(payload, h.raw_bytes);
    const uint8_t* src = payload;
    if (n) {
      h.codec = static_cast<uint8_t>(format::Codec::Zstd);
      src = z.output();
      ++out.zstd_frames;
    } else {
      n = h.raw_bytes;
      ++out.raw_frames;
    }
    vt_test::append_frame(out.bytes, h, src, n, vt_test::stream_version(in));
    return true;
  };
  const size_t at = collector::walk_frames(in.data(), in.size(), recode_frame).end;
  out.bytes.insert(out.bytes.end(), in.begin() + at, in.end());
  return out;
}

// Each record as text (its strings view the reader's frame: copied out before the next).
std::vector<std::string> events_of(std::vector<uint8_t> bytes, std::string* problem) {
  auto r = collector::TraceReader::from_bytes(std::move(bytes));
  std::vector<std::string> out;
  collector::Record e;
  while (r->next(e)) out.push_back(format::to_text(e));
  *problem = r->problem();
  return out;
}

void require_same_events(const std::vector<uint8_t>& raw, const std::vector<uint8_t>& packed) {
  std::string raw_problem, packed_problem;
  auto a = events_of(raw, &raw_problem);
  auto b = events_of(packed, &packed_problem);
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("event " << i);
    REQUIRE(a[i] == b[i]);  // type, time and every field
  }
  // A stream cut off by a crash is cut at the same place, for the same reason.
  REQUIRE(raw_problem.empty() == packed_problem.empty());
}

}  // namespace

TEST_CASE("compressed frames read back as exactly the events of the raw ones") {
  FrameCompressor z;
  REQUIRE(z.load(nullptr, nullptr));  // the build needs zstd, so libzstd.so.1 is here
  REQUIRE(z.prepare(4 << 20));

  SECTION("traces the library wrote on the stand-in") {
    for (const char* name : {"standin-threads", "standin-apis", "standin-basic", "standin-oom",
                             "standin-evil_names", "standin-grow", "standin-crash-kill"}) {
      INFO(name);
      std::vector<uint8_t> raw =
          file_bytes(std::string(VT_FUZZ_CORPUS) + "/trace_reader/" + name + ".vtrace");
      Recoded packed = recode(raw, z);
      require_same_events(raw, packed.bytes);
      if (std::string(name) == "standin-threads") {  // 55 KB in one frame: it compresses
        REQUIRE(packed.zstd_frames >= 1);
        REQUIRE(packed.bytes.size() < raw.size() / 2);
      }
    }
  }

  SECTION("a large trace of many frames, each of them compressed but the tiny last one") {
    vt_test::TraceBuilder t;
    t.context(0, 80ull << 30);
    for (uint64_t it = 0; it < 20000; ++it) {
      t.alloc(0x7e0000000000ull + (it % 6) * (1 << 28), (2 + it % 5) << 20,
              format::Api::cuMemAllocAsync);
      if (it % 1000 == 999) t.flush();
      t.free(0x7e0000000000ull + (it % 6) * (1 << 28), format::Api::cuMemFreeAsync);
    }
    std::vector<uint8_t> raw = t.exit_clean().bytes();
    Recoded packed = recode(raw, z);
    REQUIRE(packed.zstd_frames == 20);
    REQUIRE(packed.raw_frames == 1);  // the last: one exit record, which zstd cannot shrink
    require_same_events(raw, packed.bytes);
  }
  z.release();
}

TEST_CASE("frames stay raw when compression is off, unavailable or no gain") {
  for (const char* off : {"off", "0", "none", "raw"}) {
    FrameCompressor z;
    REQUIRE_FALSE(z.load(off, nullptr));
    REQUIRE_FALSE(z.prepare(1 << 20));
    const uint8_t records[64] = {};
    REQUIRE(z.compress(records, sizeof records) == 0);
  }
  FrameCompressor missing;
  REQUIRE_FALSE(missing.load("auto", "/nonexistent/libzstd.so.1"));
  REQUIRE_FALSE(missing.prepare(1 << 20));

  FrameCompressor z;
  REQUIRE(z.load("auto", nullptr));
  const uint8_t records[64] = {};
  REQUIRE(z.compress(records, sizeof records) == 0);  // not prepared: the writer has not begun
  REQUIRE(z.prepare(1 << 20));
  std::vector<uint8_t> noise(64 << 10);
  std::mt19937 rng(42);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  REQUIRE(z.compress(noise.data(), noise.size()) == 0);  // no smaller: written raw
  std::vector<uint8_t> zeros((1 << 20) + 1, 0);
  REQUIRE(z.compress(zeros.data(), zeros.size()) == 0);  // larger than prepared for
  REQUIRE(z.compress(zeros.data(), 1 << 20) > 0);
  z.release();
}

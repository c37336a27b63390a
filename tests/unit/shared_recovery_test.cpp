// Unit tests of the collector's reading back of what a dead process had not sent
// (collector/ingest/shared_recovery.h): a stream received up to some byte, the process's shared
// buffers as it left them, and the trace that results, byte for byte.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "collector/ingest/shared_recovery.h"
#include "collector/ingest/trace_reader.h"
#include "unit/trace_builder.h"

using namespace vramtrace;

namespace {

struct Frame {
  size_t begin, end;  // of the whole frame (header included) in the stream
  format::FrameHeader header;
};

// The frames of a raw stream made by TraceBuilder.
std::vector<Frame> frames_of(const std::vector<uint8_t>& s) {
  std::vector<Frame> out;
  size_t at = sizeof(format::FileHeader);
  while (at < s.size()) {
    Frame f{};
    std::memcpy(&f.header, s.data() + at, sizeof f.header);
    f.begin = at;
    f.end = at + sizeof f.header + f.header.stored_bytes;
    out.push_back(f);
    at = f.end;
  }
  return out;
}

struct TempFile {
  std::string path;
  int fd;
  TempFile() {
    char t[] = "/tmp/vt-recovery-XXXXXX";
    fd = mkstemp(t);
    REQUIRE(fd >= 0);
    path = t;
  }
  ~TempFile() {
    close(fd);
    unlink(path.c_str());
  }
  std::vector<uint8_t> contents() const {
    std::vector<uint8_t> out(static_cast<size_t>(lseek(fd, 0, SEEK_END)));
    REQUIRE(pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
    return out;
  }
};

struct Region {
  static constexpr uint64_t kCapacity = 65536;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(format::kSharedDataOffset + 2 * kCapacity);
  format::SharedControl& ctl() { return *reinterpret_cast<format::SharedControl*>(bytes.data()); }
  Region() {
    std::memcpy(ctl().magic, format::kSharedMagic, 8);
    ctl().version = format::kSharedVersion;
    ctl().buffer_count = 2;
    ctl().capacity = kCapacity;
  }
  // Buffer i holds the records of `f` (as the library had them before writing it as a frame).
  void hold(int i, const std::vector<uint8_t>& stream, const Frame& f, uint64_t epoch,
            uint64_t sending) {
    const uint32_t n = f.header.raw_bytes;
    std::memcpy(bytes.data() + format::kSharedDataOffset + i * kCapacity,
                stream.data() + f.begin + sizeof f.header, n);
    ctl().buffers[i] = {format::pack_used_count(n, f.header.record_count), f.header.base_time_ns,
                        epoch, sending};
  }
  void write_to(int fd) {
    REQUIRE(pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  }
};

// The collector's side: `received` bytes of the stream arrived and went to the trace file.
collector::StreamPosition receive(int out, const std::vector<uint8_t>& stream, size_t received) {
  collector::StreamPosition pos;
  REQUIRE(collector::write_all_fd(out, stream.data(), received));
  // In pieces of 7 bytes: the position must not depend on how reads split the stream.
  for (size_t at = 0; at < received; at += 7)
    pos.feed(stream.data() + at, std::min<size_t>(7, received - at));
  return pos;
}

std::vector<uint8_t> three_frames() {
  vt_test::TraceBuilder b;
  b.context(0, 1 << 30).alloc(0x1000, 4096).flush();    // frame 0
  b.alloc(0x2000, 8192).alloc(0x3000, 4096).flush();    // frame 1
  b.free(0x1000).alloc(0x4000, 65536).failed(1 << 30);  // frame 2
  return b.bytes();
}

}  // namespace

TEST_CASE("the collector follows a stream frame by frame") {
  std::vector<uint8_t> s = three_frames();
  std::vector<Frame> f = frames_of(s);
  REQUIRE(f.size() == 3);
  TempFile out;
  SECTION("whole") {
    collector::StreamPosition pos = receive(out.fd, s, s.size());
    REQUIRE(pos.frames == 3);
    REQUIRE(pos.boundary == s.size());
    REQUIRE_FALSE(pos.broken);
  }
  SECTION("cut inside frame 1's payload") {
    collector::StreamPosition pos = receive(out.fd, s, f[1].end - 3);
    REQUIRE(pos.frames == 1);
    REQUIRE(pos.boundary == f[1].begin);
    REQUIRE(pos.written == f[1].end - 3);
  }
  SECTION("cut inside the file header: nothing to recover into") {
    collector::StreamPosition pos = receive(out.fd, s, 9);
    REQUIRE_FALSE(pos.header_done);
    TempFile shared;
    Region r;
    r.hold(0, s, f[0], 1, 0);
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 0);
  }
}

TEST_CASE("what a dead process had not sent is appended as whole frames, in order") {
  const std::vector<uint8_t> s = three_frames();
  const std::vector<Frame> f = frames_of(s);
  TempFile out, shared;
  Region r;

  SECTION("frame 1 arrived whole, its buffer not yet cleared: only frame 2 is appended") {
    collector::StreamPosition pos = receive(out.fd, s, f[1].end);
    r.hold(0, s, f[1], 2, 1 + 1);  // being sent as frame 1
    r.hold(1, s, f[2], 3, 0);
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 1);
    REQUIRE(out.contents() == s);
  }
  SECTION("frame 1 cut off in the middle: cut off the file, then frames 1 and 2 whole") {
    collector::StreamPosition pos = receive(out.fd, s, f[1].begin + 30);
    r.hold(1, s, f[1], 2, 1 + 1);
    r.hold(0, s, f[2], 3, 0);  // buffer 0 began to fill later: it comes after
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 2);
    REQUIRE(out.contents() == s);
  }
  SECTION("neither sent (the writer had taken buffer 1 and not written it yet)") {
    collector::StreamPosition pos = receive(out.fd, s, f[1].begin);
    r.hold(1, s, f[1], 7, 0);
    r.hold(0, s, f[2], 8, 0);
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 2);
    REQUIRE(out.contents() == s);
  }
  SECTION("events dropped after the last Dropped record are counted") {
    collector::StreamPosition pos = receive(out.fd, s, f[2].begin);
    r.hold(0, s, f[2], 3, 0);
    r.ctl().dropped_pending = 5;
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 2);
    collector::TraceReader reader(out.path);
    uint64_t dropped = 0, records = 0;
    while (auto e = reader.next()) {
      ++records;
      if (e->type == format::RecordType::Dropped) dropped += e->dropped.count;
    }
    REQUIRE(reader.problem().empty());
    REQUIRE(dropped == 5);
    REQUIRE(records == 3 + 2 + 3 + 1);  // the three frames, then the Dropped record
  }
  SECTION("a region that is not one, or lies, adds nothing") {
    collector::StreamPosition pos = receive(out.fd, s, f[1].begin + 30);
    r.hold(1, s, f[1], 2, 0);
    SECTION("bad magic") { r.ctl().magic[0] = 'X'; }
    SECTION("more bytes than a buffer holds") {
      r.ctl().buffers[1].used_count = format::pack_used_count(Region::kCapacity + 1, 1);
    }
    SECTION("a capacity larger than the region: buffer 1 lies past its end") {
      r.ctl().capacity = 1u << 20;
    }
    r.write_to(shared.fd);
    REQUIRE(collector::recover_unsent(shared.fd, out.fd, pos) == 0);
    REQUIRE(out.contents() == std::vector<uint8_t>(s.begin(), s.begin() + f[1].begin + 30));
  }
}

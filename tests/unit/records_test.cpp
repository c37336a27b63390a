// Unit tests of the record table (common/records.h): the bytes a record is written as, that
// every record reads back as it was written, what the decoder refuses, and the size bounds the
// library sizes its slots by.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/record_text.h"
#include "common/records.h"

using namespace vramtrace::format;

namespace {

// put() of one record into a vector.
template <typename R, typename... Dt>
std::vector<uint8_t> bytes_of(const R& r, Dt... dt) {
  std::vector<uint8_t> out(max_bytes(r));
  uint8_t* end = put(out.data(), r, dt...);
  out.resize(static_cast<size_t>(end - out.data()));
  return out;
}

// Decodes exactly one record; "" when it is corrupt or leaves bytes over.
std::string read_one(const std::vector<uint8_t>& b, uint64_t clock = 1000) {
  ByteReader r(b.data(), b.size());
  Record rec;
  if (!decode(r, clock, rec) || !r.at_end()) return "";
  return to_text(rec);
}

}  // namespace

TEST_CASE("a record is its type, its time delta, then its fields in table order") {
  // Alloc: type 4, dt 300 (2 bytes), api 1 (one byte), device 0, address 0x1000 (2 bytes),
  // bytes 256 (2 bytes), stream 0, thread 7.
  auto b = bytes_of(rec::Alloc{Api::cuMemAlloc, 0, 0x1000, 256, 0, 7}, 300);
  REQUIRE(b == std::vector<uint8_t>{4, 0xAC, 0x02, 1, 0, 0x80, 0x20, 0x80, 0x02, 0, 7});
  REQUIRE(read_one(b) == "Alloc t=1300 api=1 device=0 address=4096 bytes=256 stream=0 thread=7");
  // An untimed record has no delta; a string is its length then its bytes.
  REQUIRE(bytes_of(rec::String{3, "ab"}) == std::vector<uint8_t>{8, 3, 2, 'a', 'b'});
  // Process: its start is an absolute time, and the record's time.
  auto p = bytes_of(rec::Process{42, 1, 5, 77, "h", "e", std::string_view("a\0b", 3), ""});
  REQUIRE(read_one(p) ==
          "Process t=77 pid=42 ppid=1 realtime_ns=5 start_ns=77 host=\"h\" "
          "exe=\"e\" cmdline=\"a\\x00b\" rank_env=\"\"");
  // Settings: the count of this version's settings, then each.
  REQUIRE(bytes_of(rec::Settings{0, 0}) == std::vector<uint8_t>{30, 1, 0});
  REQUIRE(read_one(bytes_of(rec::Settings{0, 0})) == "Settings t=0 launches=0 fields=1");
  // ExitStatus: type 32, no time, the status exit() was given.
  REQUIRE(bytes_of(rec::ExitStatus{3}) == std::vector<uint8_t>{32, 3});
  REQUIRE(read_one(bytes_of(rec::ExitStatus{255})) == "ExitStatus t=0 status=255");
  // LaunchesStopped: type 33, timed, why they stopped.
  REQUIRE(bytes_of(rec::LaunchesStopped{1}, 7) == std::vector<uint8_t>{33, 7, 1});
  REQUIRE(read_one(bytes_of(rec::LaunchesStopped{1}, 7)) == "LaunchesStopped t=1007 reason=1");
}

TEST_CASE("timed records move the frame's clock, untimed ones do not") {
  std::vector<uint8_t> b = bytes_of(rec::Step{1}, 10);
  auto s = bytes_of(rec::Dropped{2});
  b.insert(b.end(), s.begin(), s.end());
  auto t = bytes_of(rec::RangePop{9}, 5);
  b.insert(b.end(), t.begin(), t.end());
  ByteReader r(b.data(), b.size());
  uint64_t clock = 100;
  Record rec;
  REQUIRE(decode(r, clock, rec));
  REQUIRE(rec.time_ns == 110);
  REQUIRE(decode(r, clock, rec));
  REQUIRE(rec.time_ns == 0);
  REQUIRE(rec.dropped.count == 2);
  REQUIRE(decode(r, clock, rec));
  REQUIRE(rec.time_ns == 115);
  REQUIRE(rec.range_pop.thread == 9);
  REQUIRE(clock == 115);
}

TEST_CASE("the decoder refuses values no writer produces") {
  // A device ordinal of kMaxDeviceOrdinals or more; kMaxDeviceOrdinals - 1 is read.
  REQUIRE(read_one(bytes_of(rec::MemInfo{kMaxDeviceOrdinals - 1, 1, 2}, 0)) ==
          "MemInfo t=1000 device=4095 free_bytes=1 total_bytes=2");
  REQUIRE(read_one(bytes_of(rec::MemInfo{kMaxDeviceOrdinals, 1, 2}, 0)).empty());
  // A segment op past Unmap.
  REQUIRE(!read_one(bytes_of(rec::UserSegment{1, 2, 3, SegmentOp::Unmap}, 0)).empty());
  REQUIRE(read_one(bytes_of(rec::UserSegment{1, 2, 3, static_cast<SegmentOp>(4)}, 0)).empty());
  // An unknown type, and a record cut short.
  REQUIRE(read_one({33, 0}).empty());
  auto cut = bytes_of(rec::PyCode{1, "file.py", "f"});
  cut.pop_back();
  REQUIRE(read_one(cut).empty());
  // Settings: a launches value other than 0 or 1, or more than kMaxSettings fields.
  REQUIRE(read_one({30, 1, 2}).empty());
  std::vector<uint8_t> many{30, static_cast<uint8_t>(kMaxSettings + 1)};
  many.resize(many.size() + kMaxSettings + 1, 0);
  REQUIRE(read_one(many).empty());
  // Settings of a later version: the fields after those known are skipped.
  REQUIRE(read_one({30, 3, 0, 9, 9}) == "Settings t=0 launches=0 fields=3");
}

TEST_CASE("size bounds: each record fits what its writer reserves") {
  REQUIRE(max_fixed_bytes<rec::Alloc>() == 1 + 10 + 1 + 5 * 10);
  REQUIRE(max_fixed_bytes<rec::Process>() == 1 + 8 * 10);
  REQUIRE(!has_text<rec::Alloc>());
  REQUIRE(has_text<rec::Module>());
  // The worst case of every field, strings included, is within max_bytes().
  rec::Module m{~0ull, ~0ull, ~0ull, ~0ull, std::string(300, 'p'), std::string(20, 'b')};
  REQUIRE(bytes_of(m).size() <= max_bytes(m));
  REQUIRE(max_bytes(m) == max_fixed_bytes<rec::Module>() + 320);
  rec::PoolUsage u{kMaxDeviceOrdinals - 1, ~0ull, ~0ull, ~0ull, ~0ull};
  REQUIRE(bytes_of(u, ~0ull).size() <= kMaxFixedRecordBytes);
  REQUIRE(std::string(record_name(RecordType::UserOom)) == "UserOom");
}

// Unit tests of the library's intern table (interpose/intern.h): ids in order of first sight,
// a known key found again (past collisions: linear probing), and what each kind of table does
// once full: a new key always gets a fresh id the caller writes again, and a known key is still
// found (kEverySlot: the names; kThreeQuarters: the stack tables, which keep a quarter empty).
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "interpose/intern.h"

using namespace vramtrace::interpose;

namespace {

struct Key {
  uint64_t value;
  uint32_t id;
  bool same_key(const Key& o) const { return value == o.value; }
};
// Every key wants slot 0 or 1 (by its lowest bit): a run of collisions.
uint64_t low_bit(const Key& k) { return k.value & 1; }

template <typename Table>
std::vector<std::pair<uint32_t, bool>> intern_all(Table& t, uint32_t& next,
                                                  std::initializer_list<uint64_t> keys) {
  std::vector<std::pair<uint32_t, bool>> out;
  for (uint64_t k : keys) {
    const Interned i = t.intern(Key{k, 0}, [&] { return next++; });
    out.emplace_back(i.id, i.fresh);
  }
  return out;
}

using Pairs = std::vector<std::pair<uint32_t, bool>>;

InternTable<Key, low_bit, 8, InternStorage::kStatic, InternFull::kEverySlot> g_every;
InternTable<Key, low_bit, 8, InternStorage::kStatic, InternFull::kThreeQuarters> g_three;
InternTable<Key, low_bit, 8, InternStorage::kMapped, InternFull::kThreeQuarters> g_mapped;

}  // namespace

TEST_CASE("intern: ids in order of first sight, known keys found past collisions, every slot") {
  uint32_t next = 1;
  CHECK(intern_all(g_every, next, {10, 11, 12, 10, 13, 11}) ==
        Pairs{{1, true}, {2, true}, {3, true}, {1, false}, {4, true}, {2, false}});
  // Four more fill the 8 slots; a ninth key is not remembered: a fresh id each time it comes.
  CHECK(intern_all(g_every, next, {14, 15, 16, 17, 18, 18}) ==
        Pairs{{5, true}, {6, true}, {7, true}, {8, true}, {9, true}, {10, true}});
  // The full table still finds what it holds.
  CHECK(intern_all(g_every, next, {17, 10, 13}) == Pairs{{8, false}, {1, false}, {4, false}});
}

TEST_CASE("intern: a table that stops at 3/4 takes no new key, and still finds the known ones") {
  uint32_t next = 100;
  CHECK(intern_all(g_three, next, {1, 2, 3, 4, 5, 1}) ==
        Pairs{{100, true}, {101, true}, {102, true}, {103, true}, {104, true}, {100, false}});
  // The sixth key reaches 6 of 8 slots; after it a new key gets a fresh id each time it comes
  // (not remembered), a known one its id.
  CHECK(intern_all(g_three, next, {6, 7, 1, 7, 6}) ==
        Pairs{{105, true}, {106, true}, {100, false}, {107, true}, {105, false}});
}

TEST_CASE("intern: a mapped table remembers nothing until it is mapped") {
  uint32_t next = 1;
  CHECK(intern_all(g_mapped, next, {5, 5}) == Pairs{{1, true}, {2, true}});
  REQUIRE(g_mapped.map());
  CHECK(intern_all(g_mapped, next, {5, 5, 6}) == Pairs{{3, true}, {3, false}, {4, true}});
}

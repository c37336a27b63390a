// Interning in the traced process: a key (a stack frame under its parent, a Python code object,
// a kernel name, a range name) gets a small id the first time it is seen, its record (StackNode,
// PyCode, String) is written once under that id, and later records name it by id alone.
//
// InternTable is the one table all of them use: fixed capacity, open addressing with linear
// probing, no deletion. It allocates nothing from the heap, takes no lock of its own (its callers
// hold the recorder's lock: they intern inside a RecordSlot) and calls nothing but the caller's
// id source, so it is safe wherever the hooks run. When it is full, a new key still gets a fresh
// id and the caller writes its record, but the key is not remembered: the trace grows, every id
// it names is still defined.
//
// The hashes are here too (FNV-1a over bytes or words, murmur3's finaliser); live.cpp uses them
// for its own tables.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vramtrace::interpose {

namespace hash {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a of `n` bytes, continuing from `h` (kFnvOffset to start).
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}

// One FNV-1a step of a whole word (a return address) instead of a byte.
inline uint64_t fnv1a_word(uint64_t h, uint64_t word) { return (h ^ word) * kFnvPrime; }

// murmur3's fmix64: spreads a hash or a key over a table's slots.
inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

}  // namespace hash

// Where a table's slots live: in the library's own zero-initialised data (small tables), or in
// anonymous memory mapped by map() and touched only as it fills (the large stack tables; until
// map() succeeds such a table remembers nothing).
enum class InternStorage { kStatic, kMapped };

// When a table counts as full, and what it still does then:
//   kEverySlot: it fills every slot; a key already in it is still found.
//   kThreeQuarters: it takes no new key past 3/4 of its slots (a quarter stays empty, so that a
//     lookup ends at an empty slot after a few probes); a key already in it is still found.
enum class InternFull { kEverySlot, kThreeQuarters };

// The id of a key, and whether the caller must write the key's record under it (a new key, or
// one the full table does not remember).
struct Interned {
  uint32_t id;
  bool fresh;
};

// `Entry`: the key's fields and `uint32_t id` (0 in an empty slot: ids start at 1), with
// `bool same_key(const Entry&) const`. `kHash(entry)` places a key (its low bits pick the first
// slot). kSlots: a power of two. Lives in static storage (no constructor runs: usable from the
// first hook).
template <typename Entry, uint64_t (*kHash)(const Entry&), uint64_t kSlots, InternStorage kStorage,
          InternFull kFull>
class InternTable {
  static_assert(kSlots && (kSlots & (kSlots - 1)) == 0, "kSlots: a power of two");
  static_assert(std::is_trivially_copyable_v<Entry>);
  static constexpr uint64_t kMaxEntries = kFull == InternFull::kEverySlot ? kSlots : kSlots / 4 * 3;

 public:
  // Maps the slots (kMapped only); false when mmap failed, and the table stays empty.
  bool map() {
    static_assert(kStorage == InternStorage::kMapped);
    void* m = mmap(nullptr, kSlots * sizeof(Entry), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    slots_ = m == MAP_FAILED ? nullptr : static_cast<Entry*>(m);
    return slots_ != nullptr;
  }

  // The id of `key` (its id field unused). `new_id()` gives the next id of the caller's id space:
  // called once for a key the table has not seen, or does not remember.
  template <typename NewId>
  Interned intern(const Entry& key, NewId&& new_id) {
    if (!usable()) return {new_id(), true};
    const uint64_t h = kHash(key);
    for (uint64_t i = 0; i < kSlots; ++i) {
      Entry& s = slots_[(h + i) & (kSlots - 1)];
      if (s.id == 0) {  // not in the table: a key is never past the first empty slot
        if (count_ >= kMaxEntries) break;
        s = key;
        s.id = new_id();
        ++count_;
        return {s.id, true};
      }
      if (s.same_key(key)) return {s.id, false};
    }
    return {new_id(), true};
  }

 private:
  bool usable() const {
    if constexpr (kStorage == InternStorage::kMapped)
      if (!slots_) return false;
    return true;
  }

  std::conditional_t<kStorage == InternStorage::kMapped, Entry*, Entry[kSlots]> slots_;
  uint64_t count_;
};

// A fresh id for a String record: kernel names (hot_path.cpp) and range and pool names
// (annotate.cpp) share one id space. Call only inside a RecordSlot: the recorder's lock guards
// the counter.
uint32_t allocate_string_id();

}  // namespace vramtrace::interpose

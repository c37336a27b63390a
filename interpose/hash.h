// The hashes of the library's intern tables, once: FNV-1a over bytes (names, a Python frame's
// file and function) or over 64-bit words (return addresses), and murmur3's 64-bit finaliser,
// which spreads a hash or a key over a table's slots. Nothing here allocates: hot path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramtrace::interpose::hash {

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

// murmur3's fmix64.
inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

}  // namespace vramtrace::interpose::hash

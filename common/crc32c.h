// CRC32C (Castagnoli), the checksum of a trace's frames (common/format.h: frame_checksum()).
// The library's writer thread computes it once per frame and the collector once per frame it
// reads, so both use the CPU's crc32 instruction where there is one (SSE 4.2, chosen at run time:
// the library must run on any x86-64) and a table otherwise. Nothing here allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vramtrace::format {

namespace crc32c_detail {

struct Table {
  uint32_t t[8][256];
  constexpr Table() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
inline constexpr Table kTable{};

// Slicing by 8: about 1 GB/s, for CPUs without the instruction.
inline uint32_t update_table(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = kTable.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n; ++p, --n) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return c;
}

#if defined(__x86_64__)
[[gnu::target("sse4.2")]] inline uint32_t update_hw(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = static_cast<uint32_t>(c64);
  for (; n; ++p, --n) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
// Asked each time (a load of libgcc's CPU model): a function-local static would need the C++
// runtime's guard, which the preloaded library does not link.
inline bool have_hw() { return __builtin_cpu_supports("sse4.2"); }
#endif

}  // namespace crc32c_detail

// Continues `crc` (0 to start) over `n` bytes.
inline uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (crc32c_detail::have_hw()) return ~crc32c_detail::update_hw(c, p, n);
#endif
  return ~crc32c_detail::update_table(c, p, n);
}

}  // namespace vramtrace::format

// The library's options from the environment: numbers (VRAMTRACE_BUFFER_KB, VRAMTRACE_FLUSH_MS,
// VRAMTRACE_ASYNC_STACK_MIN_BYTES) and whether launches are recorded (VRAMTRACE_LAUNCHES).
//
// The library cannot refuse a bad value (the target must run as it would without it), so a value
// that is not a positive decimal number gives the default, and one past its cap gives the cap:
// never a product that wrapped around (2^54 KiB is 0 bytes; 2^58 ms is 0 ns). Header only, so
// that the unit tests read the same code.
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace vramtrace::interpose {

// The flush period's cap: a crash loses at most this much (the writer also flushes a buffer a
// quarter full, whatever the period).
inline constexpr uint64_t kMaxFlushMs = 60'000;

// Decimal digits only, at least one: strtoull alone would take "-5" as 2^64 - 5 and "abc" as 0.
inline bool is_decimal(const char* value) {
  if (!value || !*value) return false;
  for (const char* c = value; *c; ++c)
    if (*c < '0' || *c > '9') return false;
  return true;
}

// `value` x `unit`, at most `cap`; `fallback` when `value` is absent, 0, signed or not a number.
inline uint64_t scaled_option(const char* value, uint64_t fallback, uint64_t unit, uint64_t cap) {
  if (!is_decimal(value)) return fallback;
  unsigned long long x = strtoull(value, nullptr, 10);  // a number too large: 2^64 - 1
  if (x == 0) return fallback;
  return x > cap / unit ? cap : x * unit;
}

// A byte count where 0 is a value (VRAMTRACE_ASYNC_STACK_MIN_BYTES=0: every stream-ordered
// allocation gets a stack); not a decimal number gives `fallback` ("abc" was 0, "-1" 2^64 - 1).
inline uint64_t byte_count_option(const char* value, uint64_t fallback) {
  if (!is_decimal(value)) return fallback;
  return strtoull(value, nullptr, 10);  // too large: 2^64 - 1, no allocation is that large
}

inline uint64_t flush_interval_ns(const char* value) {
  return scaled_option(value, 100'000'000, 1'000'000, kMaxFlushMs * 1'000'000);
}

// Each event buffer: 64 KiB to `max_bytes` (the reader's frame limit: a buffer is one frame).
inline uint64_t buffer_bytes(const char* value, uint64_t max_bytes) {
  uint64_t b = scaled_option(value, 4096 * 1024, 1024, max_bytes);
  return b < 64 * 1024 ? 64 * 1024 : b;
}

// VRAMTRACE_LAUNCHES: `on` (or unset, or empty) records kernel launches, `off` does not. Any
// other value is a mistake the library cannot refuse: it keeps the default (on) and sets `*bad`,
// so that the caller says so once.
inline bool launches_recorded(const char* value, bool* bad) {
  *bad = false;
  if (!value || !*value || strcmp(value, "on") == 0) return true;
  if (strcmp(value, "off") == 0) return false;
  *bad = true;
  return true;
}

}  // namespace vramtrace::interpose

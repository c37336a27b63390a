// The library's options: every VRAMTRACE_* variable it reads (their names: common/env_names.h)
// is read here, by read_options() (options.cpp), and nowhere else. The parsing is header only,
// so that the unit tests read the same code.
//
// The library cannot refuse a bad value (the target must run as it would without it), so a value
// that is not a positive decimal number gives the default, and one past its cap gives the cap:
// never a product that wrapped around (2^54 KiB is 0 bytes; 2^58 ms is 0 ns).
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

// Stacks at allocations (VRAMTRACE_STACKS, VRAMTRACE_MAX_DEPTH, VRAMTRACE_ASYNC_STACK_MIN_BYTES).
struct StackOptions {
  bool native = true;      // native frames
  bool python = true;      // the allocating thread's Python frames
  bool async_all = false;  // every stream-ordered allocation gets a stack, not only large ones
  int max_depth = 64;      // frames of each kind, 1 to kMaxStackDepth
  uint64_t async_min_bytes = 64ull << 20;
};

// `mode`: auto (or unset, or empty: native and Python frames; stream-ordered allocations only
// when they fail or are at least `min_async` bytes), all (every allocation), native, python;
// none and anything unknown: no stacks. `depth`: a number from 1 (more: `max_depth_cap`), else
// the default.
inline StackOptions stack_options(const char* mode, const char* depth, const char* min_async,
                                  int max_depth_cap) {
  StackOptions o;
  o.async_min_bytes = byte_count_option(min_async, o.async_min_bytes);
  if (!mode || !*mode || strcmp(mode, "auto") == 0) {
    // the defaults
  } else if (strcmp(mode, "all") == 0) {
    o.async_all = true;
  } else if (strcmp(mode, "native") == 0) {
    o.python = false;
  } else if (strcmp(mode, "python") == 0) {
    o.native = false;
  } else {
    o.native = o.python = false;
  }
  if (depth && *depth) {
    long d = strtol(depth, nullptr, 10);
    if (d >= 1) o.max_depth = d > max_depth_cap ? max_depth_cap : static_cast<int>(d);
  }
  return o;
}

// Everything the library reads from the environment when CUDA starts it (InitializeInjection):
// strings are the environment's own (nullptr when unset).
struct Options {
  const char* output;          // VRAMTRACE_OUTPUT: a file name pattern
  const char* socket;          // VRAMTRACE_SOCKET: the collector's socket (wins over output)
  uint64_t buffer_bytes;       // VRAMTRACE_BUFFER_KB
  uint64_t flush_interval_ns;  // VRAMTRACE_FLUSH_MS
  const char* compress;        // VRAMTRACE_COMPRESS
  const char* zstd_lib;        // VRAMTRACE_ZSTD_LIB
  StackOptions stacks;
  const char* launches_value;  // VRAMTRACE_LAUNCHES as set, for the notice of a bad value
  bool launches;
  bool bad_launches;
  const char* cupti;          // VRAMTRACE_CUPTI
  const char* site_packages;  // VRAMTRACE_SITE_PACKAGES
};

// Reads them now (a forked child that starts CUDA again reads them again).
Options read_options();

// VRAMTRACE_DISABLE: read when the library is loaded, before anything else.
bool disabled_by_environment();

}  // namespace vramtrace::interpose

// Unit tests of the preloaded library's options (interpose/options.h), as the environment sets
// them: the flush period and buffer size capped, never wrapped around; VRAMTRACE_LAUNCHES;
// VRAMTRACE_STACKS and VRAMTRACE_MAX_DEPTH, and what is not a value of theirs.
#include <catch2/catch.hpp>
#include <cstdint>

#include "interpose/options.h"

TEST_CASE("the library's flush period and buffer size are capped, never wrapped around") {
  // VRAMTRACE_FLUSH_MS=288230376151711744 (2^58) x 10^6 wrapped to a period of 0 ns: the writer
  // thread woke without pause. VRAMTRACE_BUFFER_KB=18014398509481984 (2^54) x 1024 wrapped to 0
  // bytes, then the 64 KiB floor.
  using vramtrace::interpose::buffer_bytes;
  using vramtrace::interpose::flush_interval_ns;
  const uint64_t minute = 60'000'000'000ull, max_frame = 64ull << 20;
  for (const char* huge : {"288230376151711744", "99999999999999", "18446744073709551615",
                           "99999999999999999999", "60001", "60000"})
    REQUIRE(flush_interval_ns(huge) == minute);
  REQUIRE(flush_interval_ns("59999") == 59'999'000'000ull);
  REQUIRE(flush_interval_ns("1") == 1'000'000ull);
  // Not a positive decimal number: the default, 100 ms ("-5" was 2^64 - 5 to strtoull).
  for (const char* bad :
       {static_cast<const char*>(nullptr), "", "0", "abc", "-5", "+5", " 5", "5ms", "0x10", "1e3"})
    REQUIRE(flush_interval_ns(bad) == 100'000'000ull);
  REQUIRE(buffer_bytes("18014398509481984", max_frame) == max_frame);
  REQUIRE(buffer_bytes("99999999999999999999", max_frame) == max_frame);
  REQUIRE(buffer_bytes("65537", max_frame) == max_frame);
  REQUIRE(buffer_bytes("65536", max_frame) == max_frame);
  REQUIRE(buffer_bytes("1000", max_frame) == 1000 * 1024);
  REQUIRE(buffer_bytes("1", max_frame) == 64 * 1024);
  REQUIRE(buffer_bytes("-5", max_frame) == 4096 * 1024);
  REQUIRE(buffer_bytes("abc", max_frame) == 4096 * 1024);
  // VRAMTRACE_ASYNC_STACK_MIN_BYTES: 0 is a value (a stack at every stream-ordered allocation);
  // what is not a decimal number keeps the default (64 MiB), where "abc" was 0 and "-1" 2^64-1.
  using vramtrace::interpose::byte_count_option;
  const uint64_t def = 64ull << 20;
  REQUIRE(byte_count_option("0", def) == 0);
  REQUIRE(byte_count_option("8388608", def) == 8388608);
  REQUIRE(byte_count_option("99999999999999999999", def) == UINT64_MAX);
  for (const char* bad : {static_cast<const char*>(nullptr), "", "abc", "-1", "+5", "8M", "0x10"})
    REQUIRE(byte_count_option(bad, def) == def);
}

TEST_CASE("VRAMTRACE_LAUNCHES: on and off, anything else keeps the default and is said") {
  using vramtrace::interpose::launches_recorded;
  bool bad = true;
  REQUIRE(launches_recorded("off", &bad) == false);
  REQUIRE_FALSE(bad);
  for (const char* on : {static_cast<const char*>(nullptr), "", "on"}) {
    REQUIRE(launches_recorded(on, &bad) == true);
    REQUIRE_FALSE(bad);
  }
  // Not a value the library knows: launches stay recorded (the target runs as it would), and
  // the caller prints one notice.
  for (const char* wrong : {"OFF", "Off", "0", "1", "false", "no", " off", "off ", "offf"}) {
    bad = false;
    REQUIRE(launches_recorded(wrong, &bad) == true);
    REQUIRE(bad);
  }
}

TEST_CASE("VRAMTRACE_STACKS and VRAMTRACE_MAX_DEPTH: modes, depths and what is not one") {
  using vramtrace::interpose::stack_options;
  using vramtrace::interpose::StackOptions;
  auto mode = [](const char* m) { return stack_options(m, nullptr, nullptr, 128); };
  // auto (also unset or empty): native and Python frames, large stream-ordered allocations.
  for (const char* a : {static_cast<const char*>(nullptr), "", "auto"}) {
    StackOptions o = mode(a);
    REQUIRE((o.native && o.python && !o.async_all));
    REQUIRE(o.max_depth == 64);
    REQUIRE(o.async_min_bytes == 64ull << 20);
  }
  REQUIRE((mode("all").native && mode("all").python && mode("all").async_all));
  REQUIRE((mode("native").native && !mode("native").python));
  REQUIRE((!mode("python").native && mode("python").python));
  for (const char* off : {"none", "NONE", "yes", "all "}) {
    StackOptions o = mode(off);
    REQUIRE((!o.native && !o.python));
  }
  auto depth = [](const char* d) { return stack_options(nullptr, d, nullptr, 128).max_depth; };
  REQUIRE(depth("1") == 1);
  REQUIRE(depth("32") == 32);
  REQUIRE(depth("200") == 128);      // the cap
  REQUIRE(depth("12frames") == 12);  // strtol: the leading number
  for (const char* bad : {"0", "-3", "x", ""}) REQUIRE(depth(bad) == 64);
  REQUIRE(stack_options(nullptr, nullptr, "0", 128).async_min_bytes == 0);
  REQUIRE(stack_options(nullptr, nullptr, "-1", 128).async_min_bytes == 64ull << 20);
}

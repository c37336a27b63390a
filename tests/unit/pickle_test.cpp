// Unit tests of report/pickle.h, the pickler of PyTorch memory snapshots: each value's bytes as
// Python's pickle loads them (the expected bytes are what pickletools reads as the same value),
// integers at the edges of each opcode, and strings from a traced program that are not UTF-8.
#include <catch2/catch.hpp>
#include <string>

#include "report/pickle.h"

using vramtrace::report::pickle::dumps;
using vramtrace::report::pickle::Value;

namespace {
std::string body(const Value& v) {
  const std::string s = dumps(v);
  REQUIRE(s.substr(0, 2) == std::string("\x80\x02", 2));
  REQUIRE(s.back() == '.');
  return s.substr(2, s.size() - 3);
}
}  // namespace

TEST_CASE("pickle: integers take the smallest opcode that holds them, any 64-bit value") {
  CHECK(body(Value::integer(0)) == std::string("K\x00", 2));
  CHECK(body(Value::integer(255)) == "K\xff");
  CHECK(body(Value::integer(256)) == std::string("J\x00\x01\x00\x00", 5));
  CHECK(body(Value::integer(-1)) == "J\xff\xff\xff\xff");
  CHECK(body(Value::integer(INT32_MAX)) == "J\xff\xff\xff\x7f");
  // Past BININT: LONG1, little-endian two's complement, as few bytes as keep the sign.
  CHECK(body(Value::integer(-2147483649LL)) == "\x8a\x05\xff\xff\xff\x7f\xff");
  CHECK(body(Value::uinteger(2147483648ULL)) == std::string("\x8a\x05\x00\x00\x00\x80\x00", 7));
  CHECK(body(Value::uinteger(1ULL << 63)) ==
        std::string("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00", 11));
  CHECK(body(Value::uinteger(UINT64_MAX)) ==
        std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00", 11));
  CHECK(body(Value::integer(INT64_MIN)) ==
        std::string("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80", 10));
  // A device address (47 bits): six bytes.
  CHECK(body(Value::uinteger(0x7f3a00000000ULL)) ==
        std::string("\x8a\x06\x00\x00\x00\x00\x3a\x7f", 8));
}

TEST_CASE("pickle: containers, None, booleans and floats") {
  Value d = Value::dict();
  d.set("a", Value::list({Value::integer(1), Value(), Value::boolean(true)}));
  d.set("t", Value::tuple({Value::boolean(false), Value::real(1.5)}));
  d.set("e", Value::tuple({}));
  CHECK(body(d) == std::string("}(X\x01\x00\x00\x00"
                               "a](K\x01N\x88"
                               "e"
                               "X\x01\x00\x00\x00"
                               "t(\x89G\x3f\xf8\x00\x00\x00\x00\x00\x00"
                               "t"
                               "X\x01\x00\x00\x00"
                               "e)u",
                               41));
}

TEST_CASE("pickle: a program's string that is not UTF-8 is written with U+FFFD in its place") {
  // Quotes, a newline and a NUL are data, written as they are; the lone 0xff byte and the cut
  // sequence are not UTF-8, which Python's loader refuses.
  CHECK(body(Value::str(std::string("k\"\n\0\xff", 5))) ==
        std::string("X\x07\x00\x00\x00k\"\n\0\xef\xbf\xbd", 12));
  CHECK(body(Value::str("\xe2\x82")) == std::string("X\x03\x00\x00\x00\xef\xbf\xbd", 8));
  CHECK(body(Value::str("\xc3\xa9")) == std::string("X\x02\x00\x00\x00\xc3\xa9", 7));
}

TEST_CASE("pickle: lists past a thousand items are appended in batches") {
  Value l = Value::list();
  for (int i = 0; i < 1001; ++i) l.push(Value::integer(7));
  const std::string b = body(l);
  // EMPTY_LIST, MARK, 1000 x "K\x07", APPENDS, MARK, "K\x07", APPENDS.
  CHECK(b.size() == 1 + 1 + 2000 + 1 + 1 + 2 + 1);
  CHECK(b.substr(2002, 5) ==
        "e(K\x07"
        "e");
}

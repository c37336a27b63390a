// UTF-8, as every text vramtrace writes reads it: the one decoder of a sequence, for the strings
// from the traced program that report.json escapes (collector/analysis/json_text.cpp) and that
// a terminal or CI log is given (common/printable.h). Strict (RFC 3629): no overlong form, no
// surrogate, nothing past U+10FFFF, and no lead byte C0, C1 or F5-FF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vramtrace::utf8 {

// One step of a decoder at s[at], a byte from 0x80 (an ASCII byte is a code point of its own).
// `valid`: s[at, at + length) is one code point, `code_point`. Otherwise `length` is how many
// bytes begin a sequence that cannot be finished (the lead alone when it cannot begin one, or
// the lead and the continuation bytes that fit it before a byte that does not or the end): a
// decoder that replaces them as one and reads on from there agrees with nlohmann::json's.
struct Step {
  bool valid = false;
  size_t length = 1;
  uint32_t code_point = 0;
};

namespace detail {
// How many continuation bytes follow `lead`, and the range of the first (narrower after E0, ED,
// F0 and F4: no overlong form, no surrogate, nothing past U+10FFFF); 0 for a byte that cannot
// begin a sequence (80-C1, F5-FF).
struct Lead {
  int continuations = 0;
  uint8_t lo = 0x80, hi = 0xbf;
};
inline Lead lead_of(uint8_t c) {
  if (c >= 0xc2 && c <= 0xdf) return {1, 0x80, 0xbf};
  if (c == 0xe0) return {2, 0xa0, 0xbf};
  if (c == 0xed) return {2, 0x80, 0x9f};
  if (c >= 0xe1 && c <= 0xef) return {2, 0x80, 0xbf};
  if (c == 0xf0) return {3, 0x90, 0xbf};
  if (c >= 0xf1 && c <= 0xf3) return {3, 0x80, 0xbf};
  if (c == 0xf4) return {3, 0x80, 0x8f};
  return {};
}
}  // namespace detail

inline Step step(std::string_view s, size_t at) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const detail::Lead lead = detail::lead_of(u[at]);
  Step out;
  if (!lead.continuations) return out;
  out.code_point = u[at] & (lead.continuations == 1   ? 0x1fu
                            : lead.continuations == 2 ? 0x0fu
                                                      : 0x07u);
  for (size_t k = 1; k <= static_cast<size_t>(lead.continuations); ++k) {
    const uint8_t lo = k == 1 ? lead.lo : 0x80, hi = k == 1 ? lead.hi : 0xbf;
    if (at + k >= s.size() || u[at + k] < lo || u[at + k] > hi) {
      out.length = k;
      return out;
    }
    out.code_point = (out.code_point << 6) | (u[at + k] & 0x3fu);
  }
  out.valid = true;
  out.length = static_cast<size_t>(lead.continuations) + 1;
  return out;
}

// Whether all of `s` is UTF-8.
inline bool valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step st = step(s, i);
    if (!st.valid) return false;
    i += st.length;
  }
  return true;
}

}  // namespace vramtrace::utf8

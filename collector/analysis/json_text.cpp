// A string as report.json writes it (see json_text.h).
#include "collector/analysis/json_text.h"

#include <cstdint>
#include <cstdio>

namespace vramtrace::collector {

namespace {

// The bytes that may follow `lead` as its first continuation byte (the second is narrower
// after E0, ED, F0 and F4: no overlong form, no surrogate, nothing past U+10FFFF); 0 bytes
// expected for a byte that cannot begin a sequence.
struct Lead {
  int continuations = 0;
  uint8_t lo = 0x80, hi = 0xbf;
};

Lead lead_of(uint8_t c) {
  if (c >= 0xc2 && c <= 0xdf) return {1, 0x80, 0xbf};
  if (c == 0xe0) return {2, 0xa0, 0xbf};
  if (c == 0xed) return {2, 0x80, 0x9f};
  if (c >= 0xe1 && c <= 0xef) return {2, 0x80, 0xbf};
  if (c == 0xf0) return {3, 0x90, 0xbf};
  if (c >= 0xf1 && c <= 0xf3) return {3, 0x80, 0xbf};
  if (c == 0xf4) return {3, 0x80, 0x8f};
  return {};
}

void put_code_point(std::string& out, std::string_view bytes, uint32_t cp) {
  switch (cp) {
    case 0x08: out += "\\b"; return;
    case 0x09: out += "\\t"; return;
    case 0x0a: out += "\\n"; return;
    case 0x0c: out += "\\f"; return;
    case 0x0d: out += "\\r"; return;
    case 0x22: out += "\\\""; return;
    case 0x5c: out += "\\\\"; return;
    default: break;
  }
  if (cp <= 0x1f) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
    out += buf;
    return;
  }
  out.append(bytes);
}

}  // namespace

std::string json_text(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out = "\"";
  out.reserve(s.size() + 2);
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = u[i];
    if (c < 0x80) {
      put_code_point(out, s.substr(i, 1), c);
      ++i;
      continue;
    }
    const Lead lead = lead_of(c);
    if (!lead.continuations) {  // cannot begin a sequence: replaced, and passed
      out += kReplacement;
      ++i;
      continue;
    }
    // A sequence cut by a byte that cannot continue it is replaced whole, and that byte is
    // read again as the start of what follows (as nlohmann's decoder does).
    size_t k = 1;
    bool ok = true;
    for (; k <= static_cast<size_t>(lead.continuations); ++k) {
      if (i + k >= s.size()) {
        ok = false;
        break;
      }
      const uint8_t lo = k == 1 ? lead.lo : 0x80, hi = k == 1 ? lead.hi : 0xbf;
      if (u[i + k] < lo || u[i + k] > hi) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      out += kReplacement;
      i += k;
      continue;
    }
    out.append(s.substr(i, k));  // a code point from U+0080: written as it is
    i += k;
  }
  out += '"';
  return out;
}

}  // namespace vramtrace::collector

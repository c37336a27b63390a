// A string as report.json writes it (see json_text.h).
#include "collector/analysis/json_text.h"

#include <cstdint>
#include <cstdio>

#include "common/utf8.h"

namespace vramtrace::collector {

namespace {

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
    // A sequence cut by a byte that cannot continue it is replaced whole, and that byte is
    // read again as the start of what follows (as nlohmann's decoder does).
    const utf8::Step st = utf8::step(s, i);
    if (st.valid)
      out.append(s.substr(i, st.length));  // a code point from U+0080: written as it is
    else
      out += kReplacement;
    i += st.length;
  }
  out += '"';
  return out;
}

}  // namespace vramtrace::collector

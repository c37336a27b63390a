// A string from the traced program made safe for a terminal or a CI log (see printable.h).
#include "common/printable.h"

#include <cstdint>
#include <cstdio>

#include "common/utf8.h"

namespace vramtrace {

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  // A CI runner reads a line whose first characters after blanks are "::" as a workflow
  // command ("::error::", "::add-mask::"), wherever the line is printed from.
  size_t lead = 0;
  while (lead < s.size() && (s[lead] == ' ' || s[lead] == '\t')) ++lead;
  const size_t command_colon = s.compare(lead, 2, "::") == 0 ? lead : std::string_view::npos;
  for (size_t i = 0; i < s.size();) {
    if (i == command_colon) {
      out += "\\x3a";
      ++i;
      continue;
    }
    unsigned char c = u[i];
    if (c < 0x80) {
      if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else if (c < 0x20 || c == 0x7f) {
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence (common/utf8.h): a byte that begins none, or one cut short, is
    // written as its escape and the next byte read on its own.
    const utf8::Step st = utf8::step(s, i);
    if (!st.valid) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
      continue;
    }
    const uint32_t cp = st.code_point;
    const size_t n = st.length;
    // C1 controls (0x9b is a CSI on some terminals), line and paragraph separators, and the
    // bidirectional controls that reorder what is shown.
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
        (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e ||
        cp == 0x200f || cp == 0x061c) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    const bool newline = end != std::string_view::npos;
    if (!newline) end = text.size();
    out += printable(text.substr(start, end - start));
    if (newline) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace vramtrace

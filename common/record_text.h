// A decoded record as one line of text: its type, its time and each field by its name in the
// table of common/records.h (strings quoted, bytes outside printable ASCII as \xNN). For tests,
// tools and debugging; it allocates, so the preloaded library never uses it.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "common/records.h"

namespace vramtrace::format {

namespace text {
inline void field(std::string& out, const char* name, uint64_t v) {
  out += ' ';
  out += name;
  out += '=';
  out += std::to_string(v);
}
inline void field(std::string& out, const char* name, Api v) {
  field(out, name, static_cast<uint64_t>(v));
}
inline void field(std::string& out, const char* name, SegmentOp v) {
  field(out, name, static_cast<uint64_t>(v));
}
inline void field(std::string& out, const char* name, std::string_view v) {
  out += ' ';
  out += name;
  out += "=\"";
  for (unsigned char c : v) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  out += '"';
}
}  // namespace text

// "Alloc t=1000 api=1 device=0 address=4096 bytes=256 stream=0 thread=7"; an unknown type:
// "type N t=...".
inline std::string to_text(const Record& r) {
  std::string out;
  switch (r.type) {
#define VRAMTRACE_TEXT_FIELD(kind, name) text::field(out, #name, f.name);
#define VRAMTRACE_TEXT(Name, member, id, timing, fields) \
  case RecordType::Name: {                               \
    out = #Name " t=" + std::to_string(r.time_ns);       \
    const auto& f = r.member;                            \
    fields break;                                        \
  }
    VRAMTRACE_RECORDS(VRAMTRACE_TEXT, VRAMTRACE_TEXT_FIELD)
#undef VRAMTRACE_TEXT
#undef VRAMTRACE_TEXT_FIELD
    default:
      out = "type " + std::to_string(static_cast<int>(r.type)) + " t=" + std::to_string(r.time_ns);
  }
  return out;
}

}  // namespace vramtrace::format

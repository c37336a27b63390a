// A string from the traced program made safe for a terminal or a CI log: one function, which
// everything vramtrace prints or writes as text passes such strings through.
#pragma once

#include <string>
#include <string_view>

namespace vramtrace {

// Control characters (C0, DEL, C1) and bidirectional-text controls are written as escapes (\x1b,
// \n, \u202e), bytes that are not UTF-8 (common/utf8.h) as \xNN; so no such string can move the
// cursor, colour the terminal or start a line of its own (a CI command such as "::error"), nor
// be read as one by a CI runner (a leading "::" is written "\x3a:").
std::string printable(std::string_view s);

}  // namespace vramtrace

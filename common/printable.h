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

// A whole text output (the summary, check's and diff's text, the Markdown of a CI job page):
// each of its lines made printable() and its line breaks kept. Every text output passes through
// it as it is handed out, so a string from the program that one formatter forgot to escape still
// cannot reach a terminal or a CI log raw. printable() leaves text that is already printable as
// it is, so strings escaped on the way in are not escaped twice.
std::string printable_lines(std::string_view text);

}  // namespace vramtrace

// A string as report.json writes it (quoted, escaped, invalid UTF-8 replaced by U+FFFD): for
// the orderings and groupings the analysis makes that must agree with what the report shows
// (ranks named by any bytes of a process's environment, stacks told apart by their frames).
#pragma once

#include <string>
#include <string_view>

namespace vramtrace::collector {

// Byte for byte what nlohmann::json's dump() writes for the string `s` with
// error_handler_t::replace and ensure_ascii off, quotes included.
std::string json_text(std::string_view s);

}  // namespace vramtrace::collector

// The single-file HTML report: data, scripts and styles inline; nothing fetched from the network.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vramtrace::report {

// The report's JSON made safe to sit inside a <script> element: every '<', '>' and '&' (and
// every non-ASCII character) is written as a \u escape, so no string from the traced program
// can close the element or open a tag.
std::string json_for_script(const nlohmann::json& report);

std::string to_html(const nlohmann::json& report);

}  // namespace vramtrace::report

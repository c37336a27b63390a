// The single-file HTML report: data, scripts and styles inline; nothing fetched from the network.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vramtrace::report {

// The report's JSON made safe to sit inside a <script> element: every '<', '>' and '&' (and
// every non-ASCII character) is written as a \u escape, so no string from the traced program
// can close the element or open a tag.
std::string json_for_script(const nlohmann::json& report);

// report.html: the page of one run, with a <noscript> summary (verdict, peaks, OOMs).
std::string to_html(const nlohmann::json& report);

// The page of `vramtrace diff --html`: runs A and B in the same views side by side, above the
// sites whose live memory changed. `changes`: [{scope, a_peak, b_peak, changes: [{site, a, b}]}].
std::string diff_to_html(const nlohmann::json& a, const nlohmann::json& b,
                         const nlohmann::json& changes);

}  // namespace vramtrace::report

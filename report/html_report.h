// The single-file HTML report: data, scripts and styles inline; nothing fetched from the network.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vramtrace::report {

// The report's JSON made safe to sit inside a <script> element: every '<', '>' and '&' (and
// every non-ASCII character) is written as a \u escape, so no string from the traced program
// can close the element or open a tag.
std::string json_for_script(const nlohmann::json& report);

// What the page embeds of a report (or of a diff's data): every list of sites, libraries,
// stacks, modules and blocks cut to its largest entries (500; 100 of the largest blocks), with
// what the rest held in "<key>_rest" ({entries, bytes, count}) so the page's sums add up;
// phases past 3000 thinned for the chart (those at the peaks and OOMs kept); each distinct
// stack frame written once in "frames", stacks holding its index; series the page does not
// draw left out (a process's copy of its device's categories and phases, the allocator's
// free-memory series, launch and reservation series). Figures (peaks, OOMs, categories, the
// device's timelines) are not touched. A report of millions of events opens in a second.
nlohmann::json page_data(const nlohmann::json& data);

// report.html: the page of one run, with a <noscript> summary (verdict, peaks, OOMs).
std::string to_html(const nlohmann::json& report);

// Text made safe inside HTML, in an element or a quoted attribute: < > & " ' as entities.
std::string html_escape(const std::string& s);

// The page of `vramtrace diff --html`: runs A and B in the same views side by side, above the
// sites whose live memory changed. `changes`: [{scope, a_peak, b_peak, changes: [{site, a, b}]}].
std::string diff_to_html(const nlohmann::json& a, const nlohmann::json& b,
                         const nlohmann::json& changes);

}  // namespace vramtrace::report

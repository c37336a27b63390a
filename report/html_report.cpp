// Rendering report.html from the JSON report (see html_report.h). The page's views are built by
// report/web/report.js in the browser from the embedded JSON; the <noscript> summary (what
// happened, the peak, the OOMs) is written here, so the page says the essentials without
// JavaScript too.
#include "report/html_report.h"

#include <cstdio>

#include "report/html_assets.h"
#include "report/json_report.h"

namespace vramtrace::report {

using nlohmann::json;

std::string json_for_script(const json& report) {
  std::string raw = report.dump(-1, ' ', true, json::error_handler_t::replace);
  std::string out;
  out.reserve(raw.size() + raw.size() / 16);
  for (char c : raw) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

void replace_once(std::string& page, const std::string& marker, const std::string& with) {
  size_t at = page.find(marker);
  if (at != std::string::npos) page.replace(at, marker.size(), with);
}

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A value of the report as text, whatever its type (a hand-edited or older report may lack a
// key or hold another type): never throws.
std::string text_of(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}
bool has_number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number();
}
std::string bytes_of(const json& j, const char* key) {
  if (!has_number(j, key)) return "unknown";
  const double v = j[key].get<double>();
  return v < 0 ? "-" + human_bytes(static_cast<uint64_t>(-v)) : human_bytes(static_cast<uint64_t>(v));
}
std::string secs_of(const json& j, const char* key) {
  if (!has_number(j, key)) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", j[key].get<double>() / 1e9);
  return buf;
}
bool recovered(const json& o) { return o.value("recovered", false) == true; }

// The page's essentials in plain HTML: the verdict, each device's peak against its limit, the
// OOMs, and (when the report has a diagnosis) the cause and the remedies.
std::string noscript_summary(const json& r) {
  std::string out = "<div class=\"noscript\"><p><strong>JavaScript is off</strong>: this is the "
                    "summary; turn it on for the charts and breakdowns.</p>";
  const json diag = r.is_object() && r.contains("diagnosis") && r["diagnosis"].is_object()
                        ? r["diagnosis"] : json::object();
  const json ooms = r.is_object() && r.contains("oom") && r["oom"].is_array() ? r["oom"]
                                                                               : json::array();
  size_t fatal = 0, failed = 0;
  for (const auto& o : ooms) {
    if (recovered(o)) continue;
    ++failed;
    if (o.value("fatal", false) == true) ++fatal;
  }
  const bool oom = diag.contains("verdict") ? text_of(diag, "verdict") == "oom" : failed > 0;
  out += "<h2>";
  out += oom ? (fatal ? "Out of memory: the program died" : "Out of memory")
             : "No out-of-memory error";
  out += "</h2><ul>";
  if (diag.contains("limit") && diag["limit"].is_object())
    out += "<li>Limit: " + escape(text_of(diag["limit"], "title")) + " (" +
           bytes_of(diag["limit"], "bytes") + ")</li>";
  if (has_number(diag, "headroom_bytes"))
    out += "<li>Headroom: " + bytes_of(diag, "headroom_bytes") + "</li>";
  if (r.is_object() && r.contains("devices") && r["devices"].is_array())
    for (const auto& d : r["devices"]) {
      const json peak = d.contains("peak") && d["peak"].is_object() ? d["peak"] : json::object();
      out += "<li>Device " + escape(text_of(d, "index")) + " (" + escape(text_of(d, "name")) +
             "): peak " + bytes_of(peak, "bytes") + " at " + secs_of(peak, "time_ns") + " of " +
             bytes_of(d, "total_bytes") + "</li>";
    }
  for (const auto& o : ooms) {
    if (recovered(o)) continue;
    out += "<li>Out of memory on device " + escape(text_of(o, "device")) + " at " +
           secs_of(o, "time_ns") + ": " + escape(text_of(o, "api")) + " asked for " +
           bytes_of(o, "requested_bytes") + " with " + bytes_of(o, "live_bytes") +
           " live (pid " + escape(text_of(o, "pid")) + ")";
    const std::string site = text_of(o, "python_site").empty() ? text_of(o, "site")
                                                                : text_of(o, "python_site");
    if (!site.empty()) out += ", at " + escape(site);
    out += "</li>";
  }
  out += "</ul>";
  if (diag.contains("cause") && diag["cause"].is_object())
    out += "<p>Likely cause: " + escape(text_of(diag["cause"], "title")) + "</p>";
  if (diag.contains("remedies") && diag["remedies"].is_array() && !diag["remedies"].empty()) {
    out += "<p>What to try:</p><ol>";
    for (const auto& m : diag["remedies"]) {
      out += "<li>" + escape(text_of(m, "title"));
      if (has_number(m, "saves_bytes")) out += " (saves about " + bytes_of(m, "saves_bytes") + ")";
      out += "</li>";
    }
    out += "</ol>";
  }
  return out + "</div>";
}

std::string page(const json& data, const std::string& noscript) {
  std::string p = assets::template_;
  // The markers that follow the data in the page are replaced before the data goes in, and the
  // ones before it (in <head>) are found first: a string in the data that looks like a marker
  // is never replaced. The <noscript> summary goes in last, after the data: its text is never
  // searched for a marker, and the data (every '<' escaped) cannot hold its marker.
  replace_once(p, "/*VT_REPORT_JS*/", assets::report_js);
  replace_once(p, "/*VT_UPLOT_JS*/", assets::uplot_js);
  replace_once(p, "/*VT_UPLOT_CSS*/", assets::uplot_css);
  replace_once(p, "/*VT_REPORT_CSS*/", assets::report_css);
  replace_once(p, "/*VT_DATA*/", json_for_script(data));
  replace_once(p, "<!--VT_NOSCRIPT-->", noscript);
  return p;
}

std::string command_of(const json& r) {
  std::string out;
  if (r.is_object() && r.contains("run") && r["run"].is_object() && r["run"].contains("command") &&
      r["run"]["command"].is_array())
    for (const auto& a : r["run"]["command"])
      out += (out.empty() ? "" : " ") + (a.is_string() ? a.get<std::string>() : a.dump());
  return out.empty() ? "(command unknown)" : out;
}

}  // namespace

std::string to_html(const json& report) { return page(report, noscript_summary(report)); }

std::string diff_to_html(const json& a, const json& b, const json& changes) {
  json data = {{"diff",
                {{"a", a}, {"b", b}, {"names", {command_of(a), command_of(b)}}, {"changes", changes}}}};
  // Without JavaScript: the peaks and the sites that changed as a plain table, then each run's
  // summary.
  std::string ns = "<div class=\"noscript\"><h2>What changed from A to B</h2><table><tr><th>scope"
                   "</th><th>site</th><th>A</th><th>B</th></tr>";
  for (const auto& c : changes) {
    ns += "<tr><td>" + escape(text_of(c, "scope")) + "</td><td>peak</td><td>" +
          bytes_of(c, "a_peak") + "</td><td>" + bytes_of(c, "b_peak") + "</td></tr>";
    if (c.contains("changes") && c["changes"].is_array())
      for (const auto& s : c["changes"])
        ns += "<tr><td>" + escape(text_of(c, "scope")) + "</td><td>" + escape(text_of(s, "site")) +
              "</td><td>" + bytes_of(s, "a") + "</td><td>" + bytes_of(s, "b") + "</td></tr>";
  }
  ns += "</table><h2>Run A</h2><p>" + escape(command_of(a)) + "</p>" + noscript_summary(a) +
        "<h2>Run B</h2><p>" + escape(command_of(b)) + "</p>" + noscript_summary(b) + "</div>";
  return page(data, ns);
}

}  // namespace vramtrace::report

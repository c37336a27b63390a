// Rendering report.html from the JSON report (see html_report.h). The page's views are built by
// report/web/report.js in the browser from the embedded JSON.
#include "report/html_report.h"

#include "report/html_assets.h"

namespace vramtrace::report {

std::string json_for_script(const nlohmann::json& report) {
  std::string raw = report.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
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
}  // namespace

std::string to_html(const nlohmann::json& report) {
  std::string page = assets::template_;
  // The markers that follow the data in the page are replaced before the data goes in, and the
  // ones before it (in <head>) are found first: a string in the data that looks like a marker
  // is never replaced.
  replace_once(page, "/*VT_REPORT_JS*/", assets::report_js);
  replace_once(page, "/*VT_UPLOT_JS*/", assets::uplot_js);
  replace_once(page, "/*VT_UPLOT_CSS*/", assets::uplot_css);
  replace_once(page, "/*VT_REPORT_CSS*/", assets::report_css);
  replace_once(page, "/*VT_DATA*/", json_for_script(report));
  return page;
}

}  // namespace vramtrace::report

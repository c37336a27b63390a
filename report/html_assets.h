// The HTML report's embedded assets (generated from report/web by report/web/embed.cmake).
#pragma once

namespace vramtrace::report::assets {
extern const char* const template_;
extern const char* const report_js;
extern const char* const report_css;
extern const char* const uplot_js;
extern const char* const uplot_css;
}  // namespace vramtrace::report::assets

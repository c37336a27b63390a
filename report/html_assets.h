// The HTML report's embedded assets (generated from report/web by report/web/embed.cmake).
#pragma once

namespace vramtrace::report::assets {
extern const char* const template_;
extern const char* const report_js;
extern const char* const report_css;
extern const char* const uplot_js;
extern const char* const uplot_css;
// interpose/python/sitecustomize.py: PyTorch's allocator trace, turned on at `import torch`.
extern const char* const torch_hook;
}  // namespace vramtrace::report::assets

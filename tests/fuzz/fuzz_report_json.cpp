// libFuzzer target: a report.json (or a trace) given to `vramtrace check` / `vramtrace diff`.
// The input is written to a temporary file and read with report::load_report, as the CLI does;
// what loads is compared both ways with a fixed, real report (report::compare) and rendered the
// ways check and diff render it. The only exception allowed out is CheckError (the CLI's exit 2);
// anything else (a json::exception escaping, a crash, a sanitizer finding) is a bug.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "report/check.h"

using namespace vramtrace;
using nlohmann::json;

namespace {

struct Fixture {
  std::string path;
  json baseline;
  Fixture() {
    char templ[] = "/tmp/vt-fuzz-report-XXXXXX";
    int fd = mkstemp(templ);  // 0600
    if (fd < 0) abort();
    close(fd);
    path = templ;
    baseline = report::load_report(VT_FUZZ_BASELINE, "baseline");
  }
  ~Fixture() { unlink(path.c_str()); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  {
    std::ofstream out(f.path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  json candidate;
  try {
    candidate = report::load_report(f.path, "candidate");
  } catch (const report::CheckError&) {
    return 0;
  }
  report::Budgets budgets;
  try {
    report::CheckResult a = report::compare(f.baseline, candidate, budgets);
    std::string s = report::check_text(a) + report::check_markdown(a) + report::check_junit(a) +
                    report::diff_text(f.baseline, candidate, a) +
                    report::diff_html(f.baseline, candidate, a);
    report::CheckResult b = report::compare(candidate, f.baseline, budgets);
    s += report::check_text(b) + report::diff_text(candidate, f.baseline, b);
    (void)s;
    return 0;
  } catch (const report::CheckError&) {
    return 0;
  }
}

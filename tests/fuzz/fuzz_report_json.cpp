// libFuzzer target: a report.json (or a trace) given to `vramtrace check` / `vramtrace diff`.
// The input is written to a temporary file and read with cli::load_report, as the CLI does;
// what loads is compared both ways with each of two fixed, real reports (report::compare) and
// rendered the ways check and diff render it: baseline.json (one process, the stand-in `basic`)
// and baseline-ranks.json (two ranks: worst_rank, ranks, by_library), so that the keys compare
// reads only when both runs have them are reached too. The only exception allowed out is CheckError
// (the CLI's exit 2); anything else (a json::exception escaping, a crash, a sanitizer finding) is a
// bug.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/check_load.h"
#include "report/check.h"

using namespace vramtrace;
using nlohmann::json;

namespace {

struct Fixture {
  std::string path;
  report::ReportRead baselines[2];
  Fixture() {
    char templ[] = "/tmp/vt-fuzz-report-XXXXXX";
    int fd = mkstemp(templ);  // 0600
    if (fd < 0) abort();
    close(fd);
    path = templ;
    baselines[0] = cli::load_report(VT_FUZZ_BASELINE, "baseline");
    baselines[1] = cli::load_report(VT_FUZZ_BASELINE_RANKS, "baseline");
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
  report::ReportRead candidate;
  try {
    candidate = cli::load_report(f.path, "candidate");
  } catch (const report::CheckError&) {
    return 0;
  }
  report::Budgets budgets;
  for (const report::ReportRead& baseline : f.baselines) {
    try {
      report::CheckResult a = report::compare(baseline, candidate, budgets);
      std::string s = report::check_text(a) + report::check_markdown(a) + report::check_junit(a) +
                      report::diff_text(a) +
                      report::diff_html(baseline.document, candidate.document, a);
      report::CheckResult b = report::compare(candidate, baseline, budgets);
      s += report::check_text(b) + report::diff_text(b);
      (void)s;
    } catch (const report::CheckError&) {}
  }
  return 0;
}

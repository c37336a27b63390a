// Catch2 main for the e2e tests, and a listener that removes each test case's temporary
// directories (e2e_util.h temp_dir) once the case has passed; a failed case's are kept and
// named on stderr, and VT_KEEP_TEMP=1 keeps every one.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "e2e_util.h"

namespace {

struct TempDirCleanup : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    const char* keep = getenv("VT_KEEP_TEMP");
    const bool passed = stats.totals.assertions.failed == 0;
    for (const std::string& dir : temp_dirs_of_case()) {
      if (passed && !(keep && *keep == '1')) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      } else if (!passed) {
        fprintf(stderr, "kept for a look: %s\n", dir.c_str());
      }
    }
    temp_dirs_of_case().clear();
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(TempDirCleanup)

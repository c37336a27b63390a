// Unit tests reproducing the bugs found by the reliability work (fuzzing, sanitizers, the kill
// tests of tests/reliability): each case failed before its fix. See docs/RELIABILITY.md.
#include <catch2/catch.hpp>

#include "collector/model.h"
#include "report/json_report.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::TraceBuilder;

TEST_CASE("a command killed before any process used CUDA gives a report that is not complete") {
  collector::Run empty;  // no trace reached the collector
  report::RunInfo killed;
  killed.signal = 9;
  nlohmann::json j = report::to_json(empty, killed);
  REQUIRE(j["run"]["complete"] == false);
  REQUIRE(j["run"]["signal"] == 9);
  report::RunInfo exited;
  exited.exit_code = 0;
  REQUIRE(report::to_json(empty, exited)["run"]["complete"] == true);
}

// Unit tests of `vramtrace check` and `diff` (report/check.h) on what a user gives them: budgets
// that are not numbers or too large, devices that neither report has, reports missing what they
// read, peaks near 2^64, and a run with a process that was not profiled, which fails the gate.
// Each case reproduces a bug found by the reliability work (fuzzing, sanitizers, tests/reliability)
// and failed before its fix.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "cli/check_load.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/check.h"
#include "report/json_report.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::TraceBuilder;

TEST_CASE("budgets that are not numbers, or too large, are bad input, not a crash") {
  // Each of these escaped as std::invalid_argument / std::out_of_range (abort, exit 134).
  REQUIRE_THROWS_AS(report::parse_size("."), report::CheckError);
  REQUIRE_THROWS_AS(report::parse_size(std::string(400, '9')), report::CheckError);
  REQUIRE_THROWS_AS(report::parse_size("99999999999TiB"), report::CheckError);
  REQUIRE_THROWS_AS(report::parse_increase("1e999%"), report::CheckError);
  REQUIRE_THROWS_AS(report::parse_increase("nan%"), report::CheckError);
  // strtod's hexadecimal: 0x10% was read as 16% before budgets took decimal digits only;
  // 0x10 bytes a unit "x10".
  REQUIRE_THROWS_WITH(report::parse_increase("0x10%"), "'0x10%' is not a percentage (example: 5%)");
  REQUIRE_THROWS_WITH(report::parse_size("0x10"),
                      "'0x10' is not a size (examples: 256MiB, 40GiB, 1048576)");
  report::Budgets b;
  REQUIRE_THROWS_AS(report::add_increase_option(b, "99999999999999999999:5%"), report::CheckError);
  // The edges that are fine stay exact.
  REQUIRE(report::parse_size("15TiB") == 15ull << 40);
  REQUIRE(report::parse_size("18446744073709547520") == 18446744073709547520ull);
  REQUIRE(report::parse_increase("0.5%").percent == 0.5);
}

TEST_CASE("a budget too large to add saturates instead of wrapping into a regression") {
  nlohmann::json r = {
      {"schema", report::kSchema},
      {"devices", {{{"index", 0}, {"name", "x"}, {"peak", {{"bytes", UINT64_MAX - 10}}}}}},
      {"processes", nlohmann::json::array()},
      {"leaks", nlohmann::json::array()},
      {"oom", nlohmann::json::array()}};
  report::Budgets b;  // +5% of a peak near 2^64: more than 2^64 in all
  report::CheckResult same = report::compare(r, r, b);
  REQUIRE(same.rows.size() == 1);
  REQUIRE(same.rows[0].allowed_peak == UINT64_MAX);
  REQUIRE_FALSE(same.regression());
  report::add_increase_option(b, "1" + std::string(300, '0') + "%");  // 1e300%, in digits
  REQUIRE(report::compare(r, r, b).rows[0].allowed_peak == UINT64_MAX);
}

TEST_CASE("check: a device named by --device or a budget that neither report has is an error") {
  nlohmann::json r = {{"schema", report::kSchema},
                      {"devices",
                       {{{"index", 0}, {"name", "x"}, {"peak", {{"bytes", 100}}}},
                        {{"index", 2}, {"name", "y"}, {"peak", {{"bytes", 100}}}}}},
                      {"processes", nlohmann::json::array()},
                      {"leaks", nlohmann::json::array()},
                      {"oom", nlohmann::json::array()}};
  report::Budgets b;
  b.only_device = 1;  // a typo for 0 or 2: it checked nothing and passed
  REQUIRE_THROWS_WITH(report::compare(r, r, b),
                      "--device names device 1, which neither report has (devices: 0, 2)");
  b.only_device = 2;
  REQUIRE(report::compare(r, r, b).rows.size() == 1);
  report::Budgets inc;
  report::add_increase_option(inc, "3:10%");
  REQUIRE_THROWS_WITH(report::compare(r, r, inc),
                      "--max-increase names device 3, which neither report has (devices: 0, 2)");
  report::Budgets cap;
  report::add_peak_option(cap, "1:1GiB");
  REQUIRE_THROWS_WITH(report::compare(r, r, cap),
                      "--max-peak names device 1, which neither report has (devices: 0, 2)");
  nlohmann::json none = r;
  none["devices"] = nlohmann::json::array();
  REQUIRE_THROWS_WITH(report::compare(none, none, b),
                      "--device names device 2, which neither report has (no devices)");
}

namespace {
std::string write_temp(const std::string& text) {
  char path[] = "/tmp/vt-unit-report-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

// Loads `text` as a report; returns the CheckError message ("" when it loaded).
std::string load_error(const std::string& text) {
  std::string path = write_temp(text);
  std::string error;
  try {
    cli::load_report(path, "candidate");
  } catch (const report::CheckError& e) {
    error = e.what();
  }
  unlink(path.c_str());
  return error;
}
}  // namespace

TEST_CASE("a report missing what check and diff read is refused, not a crash") {
  // Each of these loaded, then made compare/diff throw json::type_error out of main (abort) or
  // read through a missing key of a const json (undefined behaviour).
  const std::string head = R"({"schema":"vramtrace.report/1",)";
  REQUIRE_THAT(load_error(head + R"("devices":[{"index":0,"peak":{"bytes":5}}],"processes":[],
                                   "leaks":[],"oom":[]})"),
               Catch::Contains("malformed report (a device without index, name or peak.bytes)"));
  REQUIRE_THAT(load_error(head + R"("devices":[],"processes":[{"devices":[{"index":0}]}],
                                   "leaks":[],"oom":[]})"),
               Catch::Contains("malformed report (a process's device without index or peak)"));
  REQUIRE_THAT(load_error(head + R"("devices":[],"processes":[]})"),
               Catch::Contains("malformed report (no \"leaks\" array)"));
  REQUIRE_THAT(load_error(head + R"("devices":[{"index":0,"name":"x","peak":{"bytes":1,
                                   "by_site":[{"site":"a","bytes":9007199254740993,"count":1}]}}],
                                   "processes":[],"leaks":[],"oom":[]})"),
               Catch::Contains("malformed report (a device without index, name or peak.bytes)"));
  REQUIRE_THAT(load_error(head + R"("devices":[],"processes":[{"devices":[],"ranks":{"RANK":0}}],
                                   "leaks":[],"oom":[]})"),
               Catch::Contains("malformed report (a rank that is not a string)"));
  REQUIRE(load_error(head + R"("devices":[],"processes":[],"leaks":[],"oom":[]})").empty());
}

TEST_CASE("peaks near 2^64 are compared without a signed overflow") {
  nlohmann::json a = {{"schema", report::kSchema},
                      {"devices", {{{"index", 0}, {"name", "x"}, {"peak", {{"bytes", 0}}}}}},
                      {"processes", nlohmann::json::array()},
                      {"leaks", nlohmann::json::array()},
                      {"oom", nlohmann::json::array()}};
  nlohmann::json b = a;
  b["devices"][0]["peak"]["bytes"] = UINT64_MAX;
  report::Budgets budgets;
  report::CheckResult r = report::compare(a, b, budgets);
  REQUIRE(r.regression());
  REQUIRE_THAT(report::check_text(r), Catch::Contains("+16777216.00 TiB (new)"));
  REQUIRE_THAT(report::diff_text(r), Catch::Contains("peak 0 B -> 16777216.00 TiB (+"));
  REQUIRE_THAT(report::diff_text(report::compare(b, a, budgets)),
               Catch::Contains("peak 16777216.00 TiB -> 0 B (-16777216.00 TiB, -100.0%)"));
}

TEST_CASE("a peak.by_library or worst_rank that compare cannot read is refused, not a crash") {
  // Found by a survey of bad inputs (the fuzz seeds predated both keys): each of these
  // loaded, then compare() threw json::type_error out of main (exit 134) or read a missing key
  // of a const json (a worst_rank without peak_bytes: SIGSEGV in `vramtrace check`).
  const std::string head = R"({"schema":"vramtrace.report/1","processes":[],"leaks":[],"oom":[],)";
  const std::string dev = R"("devices":[{"index":0,"name":"x","peak":{"bytes":1,"by_library":)";
  const std::string libs =
      "malformed report (a peak.by_library entry without library, bytes or count)";
  REQUIRE_THAT(load_error(head + dev + R"([{"bytes":"many"}]}}]})"), Catch::Contains(libs));
  REQUIRE_THAT(load_error(head + dev + R"([5]}}]})"), Catch::Contains(libs));
  REQUIRE_THAT(load_error(head + dev + R"({"a":1}}}]})"), Catch::Contains(libs));
  REQUIRE_THAT(load_error(head + dev + R"([{"library":"x","bytes":1}]}}]})"),
               Catch::Contains(libs));
  REQUIRE(load_error(head + dev + R"([{"library":"x","bytes":1,"count":1}]}}]})").empty());
  const std::string ranks = R"({"schema":"vramtrace.report/1","devices":[],"leaks":[],"oom":[],
      "processes":[{"devices":[{"index":0,"peak":{"bytes":1,"by_site":[],"by_library":[{}]}}]}]})";
  REQUIRE_THAT(load_error(ranks), Catch::Contains(libs));
  const std::string worst = "malformed report (a worst_rank without rank, peak_bytes or device)";
  const std::string none = R"("devices":[],"worst_rank":)";
  REQUIRE_THAT(load_error(head + none + "{}}"), Catch::Contains(worst));
  REQUIRE_THAT(load_error(head + none + "7}"), Catch::Contains(worst));
  REQUIRE_THAT(load_error(head + none + R"({"rank":1,"peak_bytes":5}})"), Catch::Contains(worst));
  REQUIRE_THAT(load_error(head + none + R"({"rank":1,"peak_bytes":"x","device":0}})"),
               Catch::Contains(worst));
  REQUIRE_THAT(load_error(head + none + R"({"rank":1,"peak_bytes":5,"device":-1}})"),
               Catch::Contains(worst));
  REQUIRE(load_error(head + none + R"({"rank":1,"peak_bytes":5,"device":0}})").empty());
}

namespace {
collector::Run run_of(std::vector<uint8_t> bytes) {
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(std::move(bytes)));
  return collector::model_of(std::move(readers));
}
}  // namespace

TEST_CASE("a process that was not profiled is marked so, summarised, and fails the gate") {
  // Found by the no-CUPTI test: such a run said "no CUDA device memory was used", and
  // `vramtrace check` of it passed (exit 0) with nothing measured.
  const std::string why =
      "CUPTI is already held by another tool (nsys); this process runs "
      "without memory profiling";
  TraceBuilder a(100, "testhost", ""), b(101, "testhost", "");  // no ranks: one row, device 0
  a.context(0, 1ull << 30).alloc(0x1000, 4096).exit_clean();
  b.notice(why).exit_clean();
  auto both = [&] {
    std::vector<std::unique_ptr<collector::TraceReader>> readers;
    readers.push_back(collector::TraceReader::from_bytes(a.bytes()));
    readers.push_back(collector::TraceReader::from_bytes(b.bytes()));
    return report::to_json(collector::model_of(std::move(readers)));
  };
  nlohmann::json j = both();
  nlohmann::json only_a = report::to_json(run_of(a.bytes()));
  REQUIRE(j["run"]["processes_not_profiled"] == 1);
  REQUIRE(only_a["run"]["processes_not_profiled"] == 0);
  REQUIRE(only_a["processes"][0]["profiled"] == true);
  REQUIRE_FALSE(only_a["processes"][0].contains("not_profiled_reason"));
  const nlohmann::json& pb =
      j["processes"][0]["pid"] == 101 ? j["processes"][0] : j["processes"][1];
  REQUIRE(pb["profiled"] == false);
  REQUIRE(pb["not_profiled_reason"] == why);
  REQUIRE(pb["notices"] == nlohmann::json::array({why}));
  std::string summary = report::summary_text(j);
  REQUIRE_THAT(summary, Catch::Contains("vramtrace: NOT PROFILED: pid 101 (test): " + why +
                                        "\n"
                                        "vramtrace: WARNING: 1 of 2 process(es) not profiled: the "
                                        "device memory they used is unknown and not in this "
                                        "report\n"));
  REQUIRE_THAT(summary, !Catch::Contains("no CUDA device memory was used"));

  // As the candidate: exit 3, also with every device within budget; a regression stays 1.
  report::CheckResult r = report::compare(only_a, j, report::Budgets{});
  REQUIRE(r.not_profiled == std::vector<std::string>{"pid 101 (test): " + why});
  REQUIRE_FALSE(r.regression());
  REQUIRE(report::gate_exit_code(r) == report::kExitNotProfiled);
  REQUIRE(report::gate_exit_code(report::compare(j, only_a, report::Budgets{})) == 0);
  report::Budgets none;
  none.max_increase = report::Budget{std::nullopt, 0};
  nlohmann::json smaller = j;
  smaller["devices"][0]["peak"]["bytes"] = 1024;
  REQUIRE(report::gate_exit_code(report::compare(smaller, j, none)) == report::kExitRegression);
  REQUIRE_THAT(report::check_text(r),
               Catch::EndsWith("vramtrace check: candidate NOT PROFILED: pid 101 (test): " + why +
                               "\nvramtrace check: FAILED: 1 process(es) of the candidate not "
                               "profiled: their device memory is unknown\n"));
  REQUIRE_THAT(report::diff_text(r),
               Catch::EndsWith("out-of-memory events: 0 -> 0\nB NOT PROFILED (its device memory "
                               "is unknown): pid 101 (test): " +
                               why + "\n"));
  // A report from before "profiled": a process with a notice was not profiled either.
  nlohmann::json old = j;
  for (auto& p : old["processes"]) {
    p.erase("profiled");
    p.erase("not_profiled_reason");
  }
  REQUIRE(report::unprofiled_processes(old) == r.not_profiled);
  // As the baseline: bad input.
  REQUIRE_THROWS_WITH(report::require_profiled_baseline(old, "b.json"),
                      "baseline b.json: 1 process(es) not profiled, so its peaks are unknown (pid "
                      "101 (test): " +
                          why +
                          "); record the baseline again where vramtrace can "
                          "profile every process");
  REQUIRE_NOTHROW(report::require_profiled_baseline(only_a, "a.json"));
  // What unprofiled_processes() reads is checked by load_report.
  const std::string head = R"({"schema":"vramtrace.report/1","devices":[],"leaks":[],"oom":[],
      "processes":[{"devices":[],)";
  const std::string bad =
      "malformed report (a process whose pid, exe, profiled, "
      "not_profiled_reason or notices are of the wrong type)";
  REQUIRE_THAT(load_error(head + R"("profiled":"no"}]})"), Catch::Contains(bad));
  REQUIRE_THAT(load_error(head + R"("profiled":false,"not_profiled_reason":5}]})"),
               Catch::Contains(bad));
  REQUIRE_THAT(load_error(head + R"("notices":[5]}]})"), Catch::Contains(bad));
  REQUIRE_THAT(load_error(head + R"("notices":"x"}]})"), Catch::Contains(bad));
  REQUIRE_THAT(load_error(head + R"("pid":-1,"notices":["x"]}]})"), Catch::Contains(bad));
  REQUIRE(load_error(head + R"("pid":7,"exe":"/x","profiled":false}]})").empty());
}

// Unit tests of report.json and its summary from the model at the edges (report/json_report.h):
// a run killed before any process used CUDA, many OOMs (the live sets kept of the first 64
// only), sizes near 2^63, and a rank that is not UTF-8. Each case reproduces a bug found by the
// reliability work (fuzzing, sanitizers, tests/reliability) and failed before its fix.
#include <catch2/catch.hpp>

#include "collector/analysis/levels.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/check.h"
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

namespace {
collector::Run run_of(std::vector<uint8_t> bytes) {
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(std::move(bytes)));
  return collector::model_of(std::move(readers));
}
}  // namespace

TEST_CASE("many OOMs keep the live set of the first 64 only: memory does not grow as OOMs x live") {
  // Before: every OOM copied up to 256 live allocations; 250 KB of trace (1000 live, 20000
  // OOMs) took 2.1 GiB and 5 s in `vramtrace report`, now 137 MiB and 0.6 s.
  TraceBuilder t;
  t.context(0, 1ull << 30);
  for (uint64_t i = 0; i < 10; ++i) t.alloc(0x1000 * (i + 1), 4096);
  for (int i = 0; i < 100; ++i) t.failed(1ull << 40);
  collector::Run run = run_of(t.exit_clean().bytes());
  const auto& ooms = run.processes.at(0).ooms;
  REQUIRE(ooms.size() == 100);
  REQUIRE(ooms[0].live.size() == 10);
  REQUIRE(ooms[63].live.size() == 10);
  REQUIRE(ooms[64].live.empty());
  REQUIRE(ooms[99].live.empty());
  REQUIRE(ooms[99].live_bytes == 10 * 4096);
  nlohmann::json j = report::to_json(run);
  REQUIRE(j["oom"].size() == 100);
  REQUIRE_FALSE(j["oom"][63].contains("live_set_omitted"));
  REQUIRE(j["oom"][63]["largest_live"].size() == 10);
  REQUIRE(j["oom"][64]["live_set_omitted"] == true);
  REQUIRE(j["oom"][64]["live_bytes"] == 10 * 4096);
}

TEST_CASE("allocation sizes near 2^63 add up without a signed overflow") {
  // Found by fuzz_report_json (a trace given to load_report): run_delta added int64_t deltas.
  TraceBuilder t;
  t.context(0, 1ull << 30).alloc(0x1000, 9223372036854759424ull).alloc(0x2000, 4194304);
  collector::Run run = run_of(t.free(0x2000).exit_clean().bytes());
  REQUIRE(run.devices.size() == 1);
  REQUIRE(run.devices[0].peak_bytes == 9223372036858953728ull);
  REQUIRE(run.devices[0].live_bytes == 9223372036854759424ull);
}

TEST_CASE("a rank that is not UTF-8 is reported, summarised and compared, not a crash") {
  // Found by fuzz_trace_reader (300 s run): a rank is the process's environment, any bytes;
  // sorting the ranks, the summary and compare() dumped it strictly (json::type_error 316,
  // exit 134 of `vramtrace run` and `vramtrace report` before report.json was written).
  TraceBuilder a(100, "testhost", "RANK=0\n"), b(101, "testhost", "RANK=\xca\n");
  a.context(0, 1ull << 30).alloc(0x1000, 4096).exit_clean();
  b.context(0, 1ull << 30).alloc(0x1000, 8192).exit_clean();
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(a.bytes()));
  readers.push_back(collector::TraceReader::from_bytes(b.bytes()));
  nlohmann::json j = report::to_json(collector::model_of(std::move(readers)));
  REQUIRE(j["worst_rank"]["rank"] == "\xca");
  REQUIRE(j["worst_rank"]["peak_bytes"] == 8192);
  REQUIRE_THAT(report::summary_text(j),
               Catch::Contains("vramtrace: 2 ranks; worst rank \"\xef\xbf\xbd\": peak 8.00 KiB"));
  report::CheckResult r = report::compare(j, j, report::Budgets{});
  REQUIRE_FALSE(r.regression());
  REQUIRE_THAT(report::check_text(r),
               Catch::Contains("worst rank (rank \"\xef\xbf\xbd\" -> rank \"\xef\xbf\xbd\")"));
}

namespace {
nlohmann::json report_of_data(const std::string& folder, const std::string& pid) {
  const std::string dir = std::string(VT_TEST_DATA) + "/h200/" + folder + "/";
  collector::Run run = collector::model_of(std::vector<std::string>{
      dir + "vramtrace." + pid + ".vtrace", dir + "vramtrace." + pid + ".torch"});
  return report::to_json(collector::analysis_of(run));
}
}  // namespace

TEST_CASE("a first-step death's timeline ends at its last CUDA work, the prediction's time said") {
  // ResNet-50 at batch 256 on an H200 died in its first step 0.467 s after its first CUDA work;
  // the start-up hook then ran the step on fake tensors at exit, for 9.6 s of no CUDA work.
  const nlohmann::json j = report_of_data("first-step/resnet50-b256", "744");
  const nlohmann::json& run = j["run"];
  CHECK(run["duration_ns"] == 17604741926ull);     // the run's end is still its end
  CHECK(run["timeline_end_ns"] == 7971882993ull);  // PyTorch's last block freed in the unwind
  REQUIRE(run["predicted_at_exit"].size() == 1);
  const nlohmann::json& x = run["predicted_at_exit"][0];
  CHECK(x["pid"] == 744);
  CHECK(x["last_work_ns"] == 7971882993ull);
  CHECK(x["exit_ns"] == 17604741926ull);
  const std::string note =
      "Process 744 died in its first training step: from its last CUDA work (0.495 s) to its "
      "exit (10.128 s), 9.633 s went to predicting the rest of that step on fake tensors, which "
      "used no device memory; the timeline ends at its last CUDA work.";
  CHECK(x["note"] == note);
  // The categories over time end there too, the device's and the process's.
  for (const nlohmann::json* d : {&j["devices"][0], &j["processes"][0]["devices"][0]}) {
    const nlohmann::json& pts = (*d)["categories"]["timeline"]["points"];
    CHECK(pts.size() == 527);
    CHECK(pts.back()[0] == 7971882993ull);
  }
  CHECK_THAT(report::summary_text(j), Catch::Contains("vramtrace: " + note + "\n"));
}

TEST_CASE("a run that did not die in its first step keeps its timeline to its end") {
  // ResNet-50 at batch 128 on an H200 ran to its end, its step also run on fake tensors with
  // the remedies' changes (predicted steps, none of them the completion of a step cut short).
  const nlohmann::json j = report_of_data("remedies/resnet50-b128", "520");
  CHECK(j["run"]["timeline_end_ns"] == j["run"]["duration_ns"]);
  CHECK(!j["run"].contains("predicted_at_exit"));
  CHECK(j["devices"][0]["categories"]["timeline"]["points"].back()[0] == j["run"]["duration_ns"]);
}

TEST_CASE(
    "the collector judges the headroom and fragmentation of real H200 runs and draws their limit "
    "or not") {
  // ResNet-50 at batch 256 died in its first step at PyTorch's per-process fraction of 16 GiB:
  // its peak, 17102299908 bytes, is 99.5 % of that limit (past 90 %: "over"), which the chart
  // draws; its caching allocator's free memory at the peak was 46.1 % fragmented ("ok").
  const nlohmann::json died = report_of_data("first-step/resnet50-b256", "744");
  const nlohmann::json& d = died["devices"][0];
  CHECK(d["peak"]["bytes"] == 17102299908ull);
  CHECK(died["diagnosis"]["limit"]["bytes"] == 17179869184ull);
  CHECK(d["peak"]["headroom_level"] == "over");
  CHECK(d["limit_in_chart"] == true);
  CHECK(d["allocator"]["at_peak"]["external_fragmentation"].get<double>() ==
        Approx(0.4610705116005931));
  CHECK(d["allocator"]["at_peak"]["fragmentation_level"] == "ok");
  // At batch 128 it ran to its end: 13814255112 bytes of the H200's 150109880320 (9.2 %: "ok"),
  // a capacity more than 4 times the chart's top (not drawn); its free memory at the peak was
  // 95.3 % fragmented (past 0.5: "high").
  const nlohmann::json ran = report_of_data("remedies/resnet50-b128", "520");
  const nlohmann::json& e = ran["devices"][0];
  CHECK(e["peak"]["bytes"] == 13814255112ull);
  CHECK(e["total_bytes"] == 150109880320ull);
  CHECK(ran["diagnosis"]["limit"]["kind"] == "device");
  CHECK(e["peak"]["headroom_level"] == "ok");
  CHECK(e["limit_in_chart"] == false);
  CHECK(e["allocator"]["at_peak"]["external_fragmentation"].get<double>() ==
        Approx(0.9525954354178525));
  CHECK(e["allocator"]["at_peak"]["fragmentation_level"] == "high");
}

TEST_CASE(
    "the levels' thresholds are the page's: headroom 80 and 90 % of the limit and fragmentation "
    "0.5 "
    "and imbalance 1.2 and the limit drawn within 4 times the top") {
  using namespace collector;
  CHECK(headroom_level(80, 100) == HeadroomLevel::Ok);
  CHECK(headroom_level(81, 100) == HeadroomLevel::Near);
  CHECK(headroom_level(90, 100) == HeadroomLevel::Near);
  CHECK(headroom_level(91, 100) == HeadroomLevel::Over);
  CHECK(headroom_level(91, 0) == HeadroomLevel::Unknown);
  CHECK(fragmentation_level(0.5) == FragmentationLevel::Ok);
  CHECK(fragmentation_level(0.51) == FragmentationLevel::High);
  CHECK(imbalance_level(1.2) == ImbalanceLevel::Ok);
  CHECK(imbalance_level(1.21) == ImbalanceLevel::High);
  CHECK(limit_in_chart(400, 100));
  CHECK_FALSE(limit_in_chart(401, 100));
}

TEST_CASE("a failed allocation other than out-of-memory is named by its error, a string") {
  TraceBuilder t;
  t.context(0, 1ull << 30);
  t.failed(4096, 1).failed(4096, 1).failed(8192, 12345);
  nlohmann::json j = report::to_json(run_of(t.exit_clean().bytes()));
  const auto& f = j["processes"][0]["failed_allocations"];
  REQUIRE(f.size() == 2);
  CHECK(f[0]["error"] == "CUDA error 1 (invalid value)");
  CHECK(f[0]["count"] == 2);
  CHECK(f[1]["error"] == "CUDA error 12345");
  CHECK(f[1]["count"] == 1);
  CHECK(j["oom"].empty());
  CHECK_THAT(report::summary_text(j),
             Catch::Contains("vramtrace: NOTE: pid " + j["processes"][0]["pid"].dump() +
                             ": allocations that failed for another reason than memory: CUDA "
                             "error 1 (invalid value) x 2, CUDA error 12345 x 1\n"));
}

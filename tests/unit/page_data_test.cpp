// What report.html embeds of a report (report/html_report.h, page_data): long lists cut to
// their largest entries with the rest summed so the totals still add up, stack frames written
// once, phases thinned; and every figure (peaks, categories, OOMs, timelines) exactly as the
// report has it.
#include <catch2/catch.hpp>

#include "report/html_report.h"

using nlohmann::json;
using vramtrace::report::page_data;

namespace {

constexpr uint64_t MiB = 1ull << 20;

json frame(int i) {
  return {{"function", "forward"}, {"file", "model.py"}, {"line", i}, {"python", true}};
}

// 1,200 sites at the peak: site i holds (i % 700 + 1) MiB in (i % 3 + 1) blocks, each with
// a stack of three frames out of five distinct ones; a timeline and categories; one OOM.
json big_report() {
  json sites = json::array(), stacks = json::array();
  for (int i = 0; i < 1200; ++i) {
    json stack = {frame(i % 5), frame(100), frame(101)};
    sites.push_back({{"site", "s" + std::to_string(i)},
                     {"bytes", (i % 700 + 1) * MiB},
                     {"count", i % 3 + 1},
                     {"stack", stack}});
    stacks.push_back({{"bytes", (i % 700 + 1) * MiB}, {"count", 1}, {"stack", stack}});
  }
  json points = json::array();
  for (int i = 0; i < 2048; ++i) points.push_back({i * 1000, (i % 97) * MiB, (i % 89) * MiB});
  json phases = json::array();
  for (int i = 0; i < 9000; ++i)
    phases.push_back(
        {{"phase", "forward"}, {"iteration", i}, {"start_ns", i * 10}, {"end_ns", i * 10 + 9}});
  return {{"devices",
           {{{"index", 0},
             {"total_bytes", 80 * 1024 * MiB},
             {"peak", {{"bytes", 700 * MiB}, {"time_ns", 45678}, {"by_site", sites}}},
             {"timeline", {{"points", points}}},
             {"categories", {{"at_peak", {{"activations", 600 * MiB}, {"parameters", 100 * MiB}}}}},
             {"phases", phases}}}},
          {"processes",
           {{{"pid", 7}, {"devices", {{{"index", 0}, {"peak", {{"by_stack", stacks}}}}}}}}},
          {"oom",
           {{{"device", 0},
             {"time_ns", 45678},
             {"requested_bytes", 2 * MiB},
             {"live_bytes", 700 * MiB},
             {"live_by_site", sites}}}}};
}

uint64_t sum_bytes(const json& list) {
  uint64_t s = 0;
  for (const auto& e : list) s += e["bytes"].get<uint64_t>();
  return s;
}

}  // namespace

TEST_CASE("page data: lists keep their 500 largest entries and sum the rest") {
  const json r = big_report();
  const json p = page_data(r);
  const json& peak = p["devices"][0]["peak"];
  REQUIRE(peak["by_site"].size() == 500);
  REQUIRE(peak["by_site_rest"]["entries"] == 700);
  // Sites 0..699 hold 1..700 MiB, sites 700..1199 1..500 MiB: the 500 largest are 352..700
  // MiB once (349), 352..500 MiB again (149), and both of 351 MiB (sites 350 and 1050).
  uint64_t all = sum_bytes(r["devices"][0]["peak"]["by_site"]);
  REQUIRE(all == 370600 * MiB);
  REQUIRE(sum_bytes(peak["by_site"]) == 247750 * MiB);
  REQUIRE(sum_bytes(peak["by_site"]) + peak["by_site_rest"]["bytes"].get<uint64_t>() == all);
  uint64_t smallest_kept = UINT64_MAX;
  for (const auto& e : peak["by_site"])
    smallest_kept = std::min(smallest_kept, e["bytes"].get<uint64_t>());
  REQUIRE(smallest_kept == 351 * MiB);
  REQUIRE(peak["by_site_rest"]["bytes"] == all - sum_bytes(peak["by_site"]));
  // Blocks: sum of (i % 3 + 1) over the 1,200 sites is 2,400, less those kept.
  uint64_t kept_blocks = 0;
  for (const auto& e : peak["by_site"]) kept_blocks += e["count"].get<uint64_t>();
  REQUIRE(kept_blocks + peak["by_site_rest"]["count"].get<uint64_t>() == 2400);
  // Kept in the report's order.
  REQUIRE(peak["by_site"][0]["site"] == "s350");
  REQUIRE(peak["by_site"][499]["site"] == "s1199");
  REQUIRE(p["oom"][0]["live_by_site"].size() == 500);
  REQUIRE(p["processes"][0]["devices"][0]["peak"]["by_stack"].size() == 500);
  REQUIRE(p["processes"][0]["devices"][0]["peak"]["by_stack_rest"]["entries"] == 700);
}

TEST_CASE("page data: each distinct stack frame is written once") {
  const json p = page_data(big_report());
  REQUIRE(p["frames"].size() == 7);  // model.py lines 0..4, 100 and 101
  const json& s = p["devices"][0]["peak"]["by_site"][0]["stack"];
  REQUIRE(s.size() == 3);
  REQUIRE(s[0].is_number_unsigned());
  REQUIRE(p["frames"][s[0].get<size_t>()] == frame(350 % 5));
  REQUIRE(p["frames"][s[2].get<size_t>()] == frame(101));
}

TEST_CASE("page data: the figures are the report's, exactly") {
  const json r = big_report();
  const json p = page_data(r);
  const json& d = p["devices"][0];
  REQUIRE(d["peak"]["bytes"] == 700 * MiB);
  REQUIRE(d["peak"]["time_ns"] == 45678);
  REQUIRE(d["categories"] == r["devices"][0]["categories"]);
  REQUIRE(d["timeline"] == r["devices"][0]["timeline"]);
  REQUIRE(d["timeline"]["points"].size() == 2048);
  for (const char* k : {"device", "time_ns", "requested_bytes", "live_bytes"})
    REQUIRE(p["oom"][0][k] == r["oom"][0][k]);
  REQUIRE(p["oom"][0]["live_by_site_rest"]["bytes"].get<uint64_t>() +
              sum_bytes(p["oom"][0]["live_by_site"]) ==
          370600 * MiB);
}

TEST_CASE("page data: phases past 3,000 are thinned, the one at the peak kept") {
  const json p = page_data(big_report());
  const json& ph = p["devices"][0]["phases"];
  // Every third of the 9,000 (0, 3, ...) and the one around 45,678 ns: iteration 4,567.
  REQUIRE(ph.size() == 3001);
  bool at_peak = false;
  for (const auto& x : ph) at_peak = at_peak || x["iteration"] == 4567;
  REQUIRE(at_peak);
}

TEST_CASE("page data: a small report is unchanged but for its frames") {
  json site = {{"site", "a"}, {"bytes", 5}, {"count", 1}};
  json device = {{"index", 0}, {"peak", {{"bytes", 5}, {"by_site", json::array({site})}}}};
  json r = {{"devices", json::array({device})}};
  REQUIRE(page_data(r) == r);
}

TEST_CASE("page data: the allocator's free memory over time is kept to 400 points") {
  json series = {{"columns", {"time_ns", "last_bytes"}}, {"points", json::array()}};
  for (int i = 0; i < 2000; ++i) series["points"].push_back({i * 10, i});
  json pd = {{"index", 0}, {"allocator", {{"free_timeline", series}}}};
  json r = {{"processes", {{{"pid", 1}, {"devices", json::array({pd})}}}}};
  const json page = page_data(r);
  const json& pts = page["processes"][0]["devices"][0]["allocator"]["free_timeline"]["points"];
  // Every sixth of the 2,000 (0, 6, ..., 1998: 334 points) and the last, 1999.
  REQUIRE(pts.size() == 335);
  REQUIRE(pts[0] == json({0, 0}));
  REQUIRE(pts[1] == json({60, 6}));
  REQUIRE(pts[333] == json({19980, 1998}));
  REQUIRE(pts[334] == json({19990, 1999}));
}

TEST_CASE("page data: series the page does not draw are left out, the device's kept") {
  const json cats = {{"at_peak", {{"activations", 5}}}, {"timeline", {{"points", {{0, 5}}}}}};
  const json series = {{"points", {{0, 1, 1}}}};
  json pd = {{"index", 0},
             {"categories", cats},
             {"phases", json::array()},
             {"launches", {{"top", json::array()}, {"timeline", series}}},
             {"allocator", {{"at_peak", {{"free_bytes", 3}}}, {"free_timeline", series}}}};
  json r = {{"devices", {{{"index", 0}, {"categories", cats}, {"timeline", series}}}},
            {"processes", {{{"pid", 1}, {"devices", json::array({pd})}}}}};
  const json p = page_data(r);
  REQUIRE(p["devices"] == r["devices"]);
  // The allocator's free memory over time is drawn: kept (a series this short, whole).
  REQUIRE(p["processes"][0]["devices"][0] ==
          json({{"index", 0},
                {"launches", {{"top", json::array()}}},
                {"allocator", {{"at_peak", {{"free_bytes", 3}}}, {"free_timeline", series}}}}));
}

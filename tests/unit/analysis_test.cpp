// Unit tests of the run's analysis as a typed value (collector/analysis/analysis.h), without
// report.json: the run-wide device's live set with several processes, one process's view of its
// device, leak suspects, growth and the diagnosis' moment and remedies; the ranks' order; and
// json_text, which must write a string exactly as report.json does.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "collector/analysis/analysis.h"
#include "collector/analysis/json_text.h"
#include "collector/analysis/ranks.h"
#include "common/printable.h"
#include "common/utf8.h"
#include "unit/run_of.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;

using vt_test::run_of;

std::string dumped(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

TEST_CASE("json_text writes a string as report.json does: escapes, invalid UTF-8 replaced") {
  for (const std::string& s : std::vector<std::string>{
           std::string(""), std::string("rank 0"), std::string("a\"b\\c\n\t\r\b\f\x01\x1f\x7f"),
           std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string("\x80\xff"),
           std::string("\xc3"), std::string("\xe2\x82"), std::string("\xe2\x82x"),
           std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"), std::string("\xc0\xaf"),
           std::string("\xe0\x80\xaf"), std::string("a\0b", 3)})
    REQUIRE(collector::json_text(s) == dumped(s));
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 ? 0x80 + rng() % 0x80 : rng() % 0x80);
    INFO(i);
    REQUIRE(collector::json_text(s) == dumped(s));
  }
}

TEST_CASE("one UTF-8 decoder, strict: F5-FF, overlong forms and surrogates begin nothing") {
  struct Case {
    std::string bytes;
    bool valid;
    size_t length;  // of the step at byte 0
    std::string printable;
  };
  const std::vector<Case> cases = {
      // F5-FF can begin no sequence (beyond U+10FFFF): each byte alone, escaped.
      {"\xf5\x80\x80", false, 1, "\\xf5\\x80\\x80"},
      {"\xff", false, 1, "\\xff"},
      // C0 80: an overlong NUL.
      {"\xc0\x80", false, 1, "\\xc0\\x80"},
      // ED A0 80: the surrogate U+D800.
      {"\xed\xa0\x80", false, 1, "\\xed\\xa0\\x80"},
      // F4 90 80 80: U+110000, past the last code point.
      {"\xf4\x90\x80\x80", false, 1, "\\xf4\\x90\\x80\\x80"},
      // A sequence cut short: its lead and the continuation that fits it are one step.
      {"\xe2\x82", false, 2, "\\xe2\\x82"},
      // A valid 4-byte sequence, U+1F600, kept as it is.
      {"\xf0\x9f\x98\x80", true, 4, "\xf0\x9f\x98\x80"},
  };
  for (const Case& c : cases) {
    INFO(c.printable);
    const utf8::Step st = utf8::step(c.bytes, 0);
    REQUIRE(st.valid == c.valid);
    REQUIRE(st.length == c.length);
    REQUIRE(utf8::valid(c.bytes) == c.valid);
    REQUIRE(printable(c.bytes) == c.printable);
    REQUIRE(collector::json_text(c.bytes) == dumped(c.bytes));
  }
  REQUIRE(utf8::step("\xf0\x9f\x98\x80", 0).code_point == 0x1f600);
  REQUIRE(collector::json_text("\xf5") == "\"\xef\xbf\xbd\"");
}

TEST_CASE("ranks in report.json's order: numbers by value, otherwise as written") {
  collector::Run run;
  const std::vector<std::string> values = {"10", "9", "b", "-1", "a\x80", " 3", "a", "", "2"};
  for (const std::string& v : values) {
    collector::ProcessModel p;
    p.ranks = {{"RANK", v}};
    run.processes.push_back(std::move(p));
  }
  std::vector<nlohmann::json> expected;
  for (const std::string& v : values) {
    collector::RankValue r = collector::rank_value(v);
    expected.push_back(r.number ? nlohmann::json(*r.number) : nlohmann::json(v));
  }
  // The order report.json has always had: numbers by value, others by their JSON text.
  std::stable_sort(expected.begin(), expected.end(), [](const auto& a, const auto& b) {
    if (a.is_number() && b.is_number()) return a < b;
    const auto err = nlohmann::json::error_handler_t::replace;
    return a.dump(-1, ' ', false, err) < b.dump(-1, ' ', false, err);
  });
  const collector::Ranks ranks = collector::ranks_of(run);
  REQUIRE(ranks.ranks.size() == values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const collector::RankValue& r = ranks.ranks[i].rank;
    REQUIRE((r.number ? nlohmann::json(*r.number) : nlohmann::json(r.text)) == expected[i]);
  }
  REQUIRE(ranks.spread);
}

TEST_CASE("the analysis of two processes on one device and a third alone on another") {
  TraceBuilder a(100, "testhost", "RANK=0\n"), b(101, "testhost", "RANK=1\n");
  a.context(0, 1024 * MiB).alloc(0xa000, 8 * MiB).alloc(0xb000, 2 * MiB).free(0xb000);
  a.context(1, 1024 * MiB, "Second GPU").alloc(0xc000, 32 * MiB, vt_test::Api::cuMemAlloc, 1);
  a.exit_clean();
  b.context(0, 1024 * MiB).alloc(0x1000, 4 * MiB).free(0x1000).exit_clean();
  const collector::Run run = run_of({a.bytes(), b.bytes()});
  const collector::RunAnalysis an = collector::analysis_of(run);
  REQUIRE(an.processes.size() == 2);
  REQUIRE(an.processes_complete);
  REQUIRE(an.devices.size() == 2);

  const collector::RunDeviceAnalysis& shared = an.devices[0];
  REQUIRE(shared.model->index == 0);
  REQUIRE(shared.final_live_bytes == 8 * MiB);
  REQUIRE(shared.peak);  // both processes at its peak: their live sets together
  REQUIRE(shared.device == nullptr);
  uint64_t live = 0;
  for (const auto& g : shared.peak->by_site) live += g.bytes;
  REQUIRE(live == shared.model->peak_bytes);
  REQUIRE(shared.count_by_pid.size() == 2);

  const collector::RunDeviceAnalysis& alone = an.devices[1];
  REQUIRE_FALSE(alone.peak);
  REQUIRE(alone.process == &an.processes[0]);
  REQUIRE(alone.device == &an.processes[0].devices.at(1));
  REQUIRE(alone.device->peak.largest.size() == 1);
  REQUIRE(alone.device->peak.largest[0].allocation->bytes == 32 * MiB);

  // What process 100 left: 8 MiB on device 0, 32 MiB on device 1, largest first.
  REQUIRE(an.leaks.size() == 2);
  REQUIRE(an.leaks[0].group.bytes == 32 * MiB);
  REQUIRE(an.leaks[0].device == 1);
  REQUIRE(an.leaks[1].group.bytes == 8 * MiB);
  REQUIRE(an.leaks[1].pid == 100);
  REQUIRE(an.live_at_death.empty());

  REQUIRE(an.ranks.ranks.size() == 2);
  REQUIRE(an.ranks.ranks[an.ranks.spread->worst].peak_bytes == 32 * MiB);

  // No OOM: the diagnosis is about the device closest to its capacity, with no cause.
  REQUIRE_FALSE(an.diagnosis.oom);
  REQUIRE(an.diagnosis.device == 1u);
  REQUIRE(an.diagnosis.pid == 100);
  REQUIRE(an.diagnosis.limit.kind == "device");
  REQUIRE_FALSE(an.diagnosis.cause);
}

TEST_CASE("the analysis of an OOM after growth: its findings and the diagnosis' cause") {
  TraceBuilder b;
  b.context(0, 80 * 1024 * MiB).kernel(1, "step");
  for (int i = 0; i < 12; ++i)
    b.alloc(0x100000000ull + 0x10000000ull * i, 16 * MiB)
        .launch(1)
        .free(0x100000000ull + 0x10000000ull * i)
        .alloc(0x900000000ull + 0x10000000ull * i, 64 * MiB);
  b.meminfo(0, 80 * 1024 * MiB).failed(1024 * MiB);
  const collector::Run run = run_of({b.bytes()});
  const collector::RunAnalysis an = collector::analysis_of(run);
  REQUIRE(an.processes[0].ooms.size() == 1);
  const collector::OomAnalysis& oom = an.processes[0].ooms[0];
  REQUIRE(oom.event->requested_bytes == 1024 * MiB);
  REQUIRE_FALSE(oom.findings.empty());
  REQUIRE_FALSE(oom.growth.empty());
  REQUIRE(oom.growth[0].growth.bytes_per_iteration == 64 * MiB);
  bool growth_finding = false;
  for (const auto& f : oom.findings)
    if (f.finding.kind == collector::FindingKind::Growth) {
      growth_finding = true;
      REQUIRE(f.growth_sites.size() == f.finding.evidence.growth_sites.size());
    }
  REQUIRE(growth_finding);
  // The live set at the OOM grouped by site, the findings' input, from the collector.
  uint64_t live = 0;
  for (const auto& g : oom.live.by_site) live += g.bytes;
  REQUIRE(live == oom.event->live_bytes);
  // Growth on the device feeds the diagnosis of a native program.
  REQUIRE(an.diagnosis.device == 0u);
  REQUIRE(an.diagnosis.cause);
  REQUIRE(an.diagnosis.remedies);
}

TEST_CASE(
    "the diagnosis names its OOM by its place in report.json's oom, and a native program "
    "gets CUDA's remedies only") {
  // Process 100 survives an OOM and exits cleanly; process 101 survives one and dies of the
  // next. report.json lists 100's OOM, then 101's two: the fatal one is the third.
  TraceBuilder a(100), b(101);
  a.context(0, 1024 * MiB).alloc(0xa000, 512 * MiB).failed(1024 * MiB).exit_clean();
  b.context(0, 1024 * MiB).alloc(0x1000, 256 * MiB).failed(900 * MiB);
  b.alloc(0x2000, 64 * MiB).failed(1024 * MiB);
  const collector::Run run = run_of({a.bytes(), b.bytes()});
  const collector::RunAnalysis an = collector::analysis_of(run);
  const collector::Diagnosis& dg = an.diagnosis;
  REQUIRE(dg.oom);
  REQUIRE(dg.fatal_ooms == 1);
  REQUIRE(dg.recovered_ooms == 2);
  REQUIRE(dg.oom_index == size_t{2});
  REQUIRE(dg.oom_fatal);
  REQUIRE(dg.pid == 101);
  REQUIRE(dg.held_bytes == 320 * MiB);
  REQUIRE(dg.requested_bytes == 1024 * MiB);
  REQUIRE(dg.limit.kind == "device");
  REQUIRE(dg.limit.bytes == 1024 * MiB);
  // A native program: one remedy, in CUDA's terms, cutting what it held with its request
  // (1344 MiB) to the 1024 MiB device.
  REQUIRE(dg.remedies);
  REQUIRE(dg.remedies->size() == 1);
  const collector::RemedyOutcome& r = dg.remedies->front();
  REQUIRE(r.remedy.kind == collector::RemedyKind::SmallerWorkingSet);
  REQUIRE(r.remedy.saves_bytes == 320 * MiB);
  REQUIRE(r.predicted_peak == 1024 * MiB);
  REQUIRE(r.remedy.upper_bound);
  REQUIRE_FALSE(r.replayed);
}

TEST_CASE(
    "with no device's capacity known, the diagnosis names the device of the largest "
    "peak, against no limit") {
  TraceBuilder a(100), b(101);
  a.context(0, 0).alloc(0xa000, 8 * MiB).exit_clean();
  b.context(1, 0).alloc(0x1000, 32 * MiB, vt_test::Api::cuMemAlloc, 1).exit_clean();
  const collector::Run run = run_of({a.bytes(), b.bytes()});
  const collector::Diagnosis& dg = collector::analysis_of(run).diagnosis;
  REQUIRE_FALSE(dg.oom);
  REQUIRE_FALSE(dg.oom_index);
  REQUIRE(dg.device == 1u);
  REQUIRE(dg.pid == 101);
  REQUIRE(dg.held_bytes == 32 * MiB);
  REQUIRE(dg.limit.kind.empty());
  REQUIRE_FALSE(dg.cause);
  REQUIRE_FALSE(dg.remedies);
}

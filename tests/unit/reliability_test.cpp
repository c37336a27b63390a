// Unit tests reproducing the bugs found by the reliability work (fuzzing, sanitizers, the kill
// tests of tests/reliability): each case failed before its fix, and its name says what went wrong.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "common/format.h"
#include "interpose/options.h"
#include "report/check.h"
#include "report/json_report.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::Api;
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
    report::load_report(path, "candidate");
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

namespace {
// Peak resident set, in KiB, of a child process that reads `bytes` as a trace to its end.
long child_peak_kb(const std::vector<uint8_t>& bytes) {
  pid_t pid = fork();
  if (pid == 0) {
    try {
      auto r = collector::TraceReader::from_bytes(bytes);
      while (r->next()) {}
    } catch (...) {}
    _exit(0);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(wait4(pid, &status, 0, &usage) == pid);
  REQUIRE(WIFEXITED(status));
  return usage.ru_maxrss;
}
}  // namespace

TEST_CASE("a frame header claiming 64 MiB in a short trace does not allocate 64 MiB") {
  // Found by fuzzing (peak RSS of the trace fuzzer): 40 bytes of input made the reader zero a
  // 64 MiB buffer before finding that the frame is not there.
  std::vector<uint8_t> t = TraceBuilder().context(0, 1 << 30).bytes();
  const std::vector<uint8_t> good = t;
  format::FrameHeader h{};
  h.stored_bytes = h.raw_bytes = format::kMaxFrameBytes;
  h.record_count = 1;
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  t.insert(t.end(), p, p + sizeof h);
  t.insert(t.end(), 16, 0x42);
  auto r = collector::TraceReader::from_bytes(t);
  while (r->next()) {}
  REQUIRE(r->problem() == "trace ends inside a frame at byte " + std::to_string(good.size()) +
                              " (16 of 67108864 bytes; the process was cut off while writing)");
  REQUIRE(child_peak_kb(t) < child_peak_kb(good) + 16 * 1024);

  // A zstd frame whose header claims 64 MiB but whose data says otherwise.
  std::vector<uint8_t> z = TraceBuilder().bytes();
  h.codec = static_cast<uint8_t>(format::Codec::Zstd);
  h.stored_bytes = 16;
  z.insert(z.end(), p, p + sizeof h);
  const uint8_t zstd_frame[16] = {0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x01, 0x09, 0x00, 0x00, 0x41};
  z.insert(z.end(), zstd_frame, zstd_frame + 16);
  auto rz = collector::TraceReader::from_bytes(z);
  while (rz->next()) {}
  REQUIRE_THAT(rz->problem(), Catch::StartsWith("corrupt compressed frame at byte"));
  REQUIRE(child_peak_kb(z) < child_peak_kb(good) + 16 * 1024);
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

TEST_CASE("a device ordinal of 4096 or more is a corrupt record, not one more device") {
  // Before: each distinct ordinal was a device of the model and the report: a 0.5 MB trace of
  // 40000 ordinals gave a 150 MB report.json, 1.4 GiB and (before run_device was indexed) 1 min.
  TraceBuilder t;
  t.context(0, 1ull << 30).alloc(0x1000, 4096, Api::cuMemAlloc, 4095);
  t.alloc(0x2000, 4096, Api::cuMemAlloc, 4096).alloc(0x3000, 4096);
  auto r = collector::TraceReader::from_bytes(t.bytes());
  std::vector<uint32_t> devices;
  while (auto e = r->next())
    if (e->type == format::RecordType::Alloc) devices.push_back(e->alloc.device);
  REQUIRE(devices == std::vector<uint32_t>{4095});
  REQUIRE(r->problem() == "corrupt record in frame 1 (type 4)");
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

TEST_CASE("the library's flush period and buffer size are capped, never wrapped around") {
  // VRAMTRACE_FLUSH_MS=288230376151711744 (2^58) x 10^6 wrapped to a period of 0 ns: the writer
  // thread woke without pause. VRAMTRACE_BUFFER_KB=18014398509481984 (2^54) x 1024 wrapped to 0
  // bytes, then the 64 KiB floor.
  using vramtrace::interpose::buffer_bytes;
  using vramtrace::interpose::flush_interval_ns;
  const uint64_t minute = 60'000'000'000ull, max_frame = 64ull << 20;
  for (const char* huge : {"288230376151711744", "99999999999999", "18446744073709551615",
                           "99999999999999999999", "60001", "60000"})
    REQUIRE(flush_interval_ns(huge) == minute);
  REQUIRE(flush_interval_ns("59999") == 59'999'000'000ull);
  REQUIRE(flush_interval_ns("1") == 1'000'000ull);
  // Not a positive decimal number: the default, 100 ms ("-5" was 2^64 - 5 to strtoull).
  for (const char* bad :
       {static_cast<const char*>(nullptr), "", "0", "abc", "-5", "+5", " 5", "5ms", "0x10", "1e3"})
    REQUIRE(flush_interval_ns(bad) == 100'000'000ull);
  REQUIRE(buffer_bytes("18014398509481984", max_frame) == max_frame);
  REQUIRE(buffer_bytes("99999999999999999999", max_frame) == max_frame);
  REQUIRE(buffer_bytes("65537", max_frame) == max_frame);
  REQUIRE(buffer_bytes("65536", max_frame) == max_frame);
  REQUIRE(buffer_bytes("1000", max_frame) == 1000 * 1024);
  REQUIRE(buffer_bytes("1", max_frame) == 64 * 1024);
  REQUIRE(buffer_bytes("-5", max_frame) == 4096 * 1024);
  REQUIRE(buffer_bytes("abc", max_frame) == 4096 * 1024);
  // VRAMTRACE_ASYNC_STACK_MIN_BYTES: 0 is a value (a stack at every stream-ordered allocation);
  // what is not a decimal number keeps the default (64 MiB), where "abc" was 0 and "-1" 2^64-1.
  using vramtrace::interpose::byte_count_option;
  const uint64_t def = 64ull << 20;
  REQUIRE(byte_count_option("0", def) == 0);
  REQUIRE(byte_count_option("8388608", def) == 8388608);
  REQUIRE(byte_count_option("99999999999999999999", def) == UINT64_MAX);
  for (const char* bad : {static_cast<const char*>(nullptr), "", "abc", "-1", "+5", "8M", "0x10"})
    REQUIRE(byte_count_option(bad, def) == def);
}

TEST_CASE("VRAMTRACE_LAUNCHES: on and off, anything else keeps the default and is said") {
  using vramtrace::interpose::launches_recorded;
  bool bad = true;
  REQUIRE(launches_recorded("off", &bad) == false);
  REQUIRE_FALSE(bad);
  for (const char* on : {static_cast<const char*>(nullptr), "", "on"}) {
    REQUIRE(launches_recorded(on, &bad) == true);
    REQUIRE_FALSE(bad);
  }
  // Not a value the library knows: launches stay recorded (the target runs as it would), and
  // the caller prints one notice.
  for (const char* wrong : {"OFF", "Off", "0", "1", "false", "no", " off", "off ", "offf"}) {
    bad = false;
    REQUIRE(launches_recorded(wrong, &bad) == true);
    REQUIRE(bad);
  }
}

TEST_CASE("VRAMTRACE_STACKS and VRAMTRACE_MAX_DEPTH: modes, depths and what is not one") {
  using vramtrace::interpose::stack_options;
  using vramtrace::interpose::StackOptions;
  auto mode = [](const char* m) { return stack_options(m, nullptr, nullptr, 128); };
  // auto (also unset or empty): native and Python frames, large stream-ordered allocations.
  for (const char* a : {static_cast<const char*>(nullptr), "", "auto"}) {
    StackOptions o = mode(a);
    REQUIRE((o.native && o.python && !o.async_all));
    REQUIRE(o.max_depth == 64);
    REQUIRE(o.async_min_bytes == 64ull << 20);
  }
  REQUIRE((mode("all").native && mode("all").python && mode("all").async_all));
  REQUIRE((mode("native").native && !mode("native").python));
  REQUIRE((!mode("python").native && mode("python").python));
  for (const char* off : {"none", "NONE", "yes", "all "}) {
    StackOptions o = mode(off);
    REQUIRE((!o.native && !o.python));
  }
  auto depth = [](const char* d) { return stack_options(nullptr, d, nullptr, 128).max_depth; };
  REQUIRE(depth("1") == 1);
  REQUIRE(depth("32") == 32);
  REQUIRE(depth("200") == 128);      // the cap
  REQUIRE(depth("12frames") == 12);  // strtol: the leading number
  for (const char* bad : {"0", "-3", "x", ""}) REQUIRE(depth(bad) == 64);
  REQUIRE(stack_options(nullptr, nullptr, "0", 128).async_min_bytes == 0);
  REQUIRE(stack_options(nullptr, nullptr, "-1", 128).async_min_bytes == 64ull << 20);
}

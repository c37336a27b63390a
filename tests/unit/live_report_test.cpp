// The report of a moment of a running run (cli/live_report.h): a trace being written is read up
// to the end of its last whole frame (a frame half there is left for the next moment, never
// reported as a cut trace); a process connected but without a whole frame yet is not there
// yet; the report is made again only when the traces grew or the run's state changed; what is
// live now, by site; once finished, the final report with "running": false.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/live_report.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "unit/trace_builder.h"

namespace fs = std::filesystem;
using nlohmann::json;
using vramtrace::cli::LiveReport;
using vramtrace::collector::whole_frames_end;
using vramtrace::report::RunInfo;
using vt_test::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1ull << 20;

struct TempDir {
  std::string path;
  TempDir() {
    char templ[] = "/tmp/vt-live-unit-XXXXXX";
    path = mkdtemp(templ);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
}

// A process's stream as the collector stores it: two whole frames (its process record and a
// context; an allocation of 16 MiB), then a frame of another 32 MiB.
struct Stream {
  std::vector<uint8_t> bytes;
  size_t first = 0, second = 0;  // ends of the first two frames
  Stream() {
    TraceBuilder t(4242);
    t.context(0, 1024 * MiB).flush();
    first = t.bytes().size();
    t.alloc(0x1000, 16 * MiB).flush();
    second = t.bytes().size();
    t.alloc(0x9000000, 32 * MiB);
    bytes = t.bytes();
  }
};

}  // namespace

TEST_CASE("a trace being written ends at its last whole frame") {
  TempDir dir;
  const std::string path = dir.path + "/vramtrace.4242.vtrace";
  Stream s;
  write(path, s.bytes, 10);  // not even its file header
  CHECK(whole_frames_end(path) == 0);
  write(path, s.bytes, sizeof(vramtrace::format::FileHeader) + 3);  // no whole frame
  CHECK(whole_frames_end(path) == 0);
  write(path, s.bytes, s.second + 7);  // the third frame's header is on its way
  CHECK(whole_frames_end(path) == s.second);
  CHECK(whole_frames_end(path, s.first) == s.second);  // from a boundary found before
  write(path, s.bytes, s.bytes.size() - 1);            // its last byte missing
  CHECK(whole_frames_end(path) == s.second);
  write(path, s.bytes, s.bytes.size());
  CHECK(whole_frames_end(path) == s.bytes.size());

  // Read up to there, the trace is whole: no problem said.
  write(path, s.bytes, s.bytes.size() - 1);
  vramtrace::collector::TraceReader r(path, s.second);
  uint64_t records = 0;
  vramtrace::collector::Record rec;
  while (r.next(rec)) ++records;
  CHECK(records == 3);  // process, context, the first allocation
  CHECK_FALSE(r.partial());
}

TEST_CASE("the report of a moment: made again only when the run grew, the final one at the end") {
  TempDir dir;
  const std::string path = dir.path + "/vramtrace.4242.vtrace";
  Stream s;
  RunInfo state;
  state.command = {"train"};
  state.still_running = {path};
  int asked = 0;
  LiveReport live(dir.path, [&] {
    ++asked;
    return state;
  });

  // Connected, nothing whole yet: no process.
  write(path, s.bytes, 20);
  auto a = live.now();
  REQUIRE(a);
  CHECK((*a)["processes"].empty());
  CHECK((*a)["live"]["running"] == true);

  write(path, s.bytes, s.second + 5);
  auto b = live.now();
  REQUIRE((*b)["processes"].size() == 1);
  const json& p = (*b)["processes"][0];
  CHECK(p["still_running"] == true);
  CHECK(p["cut_short"] == false);
  CHECK(p.value("problem", std::string()).empty());
  CHECK((*b)["run"]["problems"].empty());
  CHECK((*b)["leaks"].empty());  // a running process's memory is not a leak
  REQUIRE((*b)["live"]["now"].size() == 1);
  CHECK((*b)["live"]["now"][0]["bytes"] == 16 * MiB);
  CHECK((*b)["live"]["now"][0]["by_site"][0]["bytes"] == 16 * MiB);
  CHECK((*b)["live"]["now"][0]["by_process"] == json::parse(R"([{"pid": 4242, "bytes": 16777216,
                                                                 "count": 1}])"));

  // Nothing new: the same report, not made again.
  CHECK(live.now() == b);
  CHECK(asked == 3);

  // The third frame whole: a new report, with both allocations.
  write(path, s.bytes, s.bytes.size());
  auto c = live.now();
  CHECK(c != b);
  CHECK((*c)["live"]["now"][0]["bytes"] == 48 * MiB);
  CHECK((*c)["devices"][0]["peak"]["bytes"] == 48 * MiB);

  // The run's state changed (its command ended), the traces did not: a new report.
  state.exit_code = 0;
  auto d = live.now();
  CHECK(d != c);
  CHECK((*d)["run"]["exit_code"] == 0);

  // The final report: as written, with "running": false, from then on.
  json final_report = {{"schema", "vramtrace.report/1"}, {"devices", json::array()}};
  live.finish(final_report);
  auto e = live.now();
  CHECK((*e)["live"] == json({{"running", false}}));
  CHECK((*e)["schema"] == "vramtrace.report/1");
  CHECK(live.now() == e);
}

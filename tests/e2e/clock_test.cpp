// End-to-end test of the trace's clock: the time the collector reads for a record is the time
// the library took for it, also after records that carry no time of their own (a UserPool, the
// module map), and so the order of records across processes is the order of real time.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "e2e/e2e_util.h"

using namespace vramtrace;

TEST_CASE("trace clock: an allocation after a record without time keeps its own time") {
  std::string dir = temp_dir();
  const std::string trace = dir + "/clock.vtrace";
  // No flush during the program: every record is in one frame, whose clock runs on deltas only.
  Result r = sh("cd " + dir + " && " + kEnv + "LD_PRELOAD=" + kLib +
                " VRAMTRACE_FLUSH_MS=60000 VRAMTRACE_OUTPUT=" + trace + " " + prog("clock_check"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  std::istringstream in(r.out.substr(r.out.find("window ")));
  std::string word;
  uint64_t before = 0, after = 0;
  in >> word >> before >> after;
  REQUIRE(before > 0);
  REQUIRE(after >= before);

  collector::TraceReader reader(trace);
  collector::Record e;
  std::vector<std::pair<uint64_t, uint64_t>> allocs;  // bytes, time
  int pools = 0;
  while (reader.next(e)) {
    if (e.type == format::RecordType::Alloc) allocs.emplace_back(e.alloc.bytes, e.time_ns);
    if (e.type == format::RecordType::UserPool) ++pools;
  }
  REQUIRE_FALSE(reader.partial());
  REQUIRE(pools == 1);
  REQUIRE(allocs.size() == 2);
  CHECK(allocs[0].first == 1 * MiB);
  CHECK(allocs[1].first == 2 * MiB);
  // A 30 ms sleep lies between the two allocations, and B's time is within the window the
  // program read around its cudaMalloc.
  CHECK(allocs[1].second - allocs[0].second >= 30'000'000);
  CHECK(allocs[1].second >= before);
  CHECK(allocs[1].second <= after);
}

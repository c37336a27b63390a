// End-to-end tests of compressed traces: the library's writer thread compresses frames with a
// dlopen'd libzstd by default; VRAMTRACE_COMPRESS=off, or no libzstd, gives raw frames. Either
// way the trace holds the same events and gives the same exact report.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "collector/ingest/frames.h"
#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "e2e/e2e_util.h"

using nlohmann::json;
using namespace vramtrace;

namespace {

constexpr int kIterations = 300;  // bench_mix: 32 events an iteration, 9,600 and more in all

struct Frames {
  int raw = 0, zstd = 0;
  uint64_t raw_records = 0, zstd_records = 0;
};

// Walks the frame headers of a trace file.
Frames frames_of(const std::string& path) {
  std::string b = slurp(path);
  Frames f;
  auto count = [&f](const collector::FrameAt& frame, const uint8_t*) {
    const format::FrameHeader& h = frame.header;
    if (h.codec == static_cast<uint8_t>(format::Codec::Zstd)) {
      ++f.zstd;
      f.zstd_records += h.record_count;
      REQUIRE(h.stored_bytes < h.raw_bytes);
    } else {
      REQUIRE(h.codec == static_cast<uint8_t>(format::Codec::Raw));
      ++f.raw;
      f.raw_records += h.record_count;
    }
    return true;
  };
  const auto* data = reinterpret_cast<const uint8_t*>(b.data());
  const size_t at = collector::walk_frames(data, b.size(), count).end;
  REQUIRE(at == b.size());
  return f;
}

// What the program did, in order, without what differs between two runs of it (times,
// addresses, thread ids, the module map): type, api, device, bytes, and a launch's kernel name.
using Op = std::tuple<int, int, uint32_t, uint64_t, std::string>;
struct Read {
  std::vector<Op> ops;
  uint64_t records = 0, exit_says = 0;
};

Read read_trace(const std::string& path) {
  collector::TraceReader r(path);
  Read out;
  std::map<uint64_t, std::string> names;
  collector::Record e;
  auto op = [&](format::Api api, uint32_t device, uint64_t bytes, std::string name = "") {
    out.ops.emplace_back(static_cast<int>(e.type), static_cast<int>(api), device, bytes, name);
  };
  while (r.next(e)) {
    ++out.records;
    switch (e.type) {
      case format::RecordType::String: names[e.string.id] = e.string.text; break;
      case format::RecordType::ProcessExit: out.exit_says = e.process_exit.recorded; break;
      case format::RecordType::Alloc: op(e.alloc.api, e.alloc.device, e.alloc.bytes); break;
      case format::RecordType::Free: op(e.free.api, e.free.device, 0); break;
      case format::RecordType::AllocFailed:
        op(e.alloc_failed.api, e.alloc_failed.device, e.alloc_failed.bytes);
        break;
      case format::RecordType::Launch:
        op(e.launch.api, e.launch.device, 0, names[e.launch.name_id]);
        break;
      case format::RecordType::ContextCreate:
        op(format::Api::Unknown, e.context_create.device, e.context_create.total_bytes);
        break;
      default: break;
    }
  }
  REQUIRE_FALSE(r.partial());
  return out;
}

json report_of(const std::string& trace, const std::string& out) {
  Result r = sh(kVramtrace + " report " + trace + " -o " + out);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  return json::parse(slurp(out + "/report.json"));
}

// The exact figures bench_mix is written to produce.
void check_figures(const json& r) {
  const json& d = r["devices"][0];
  REQUIRE(d["peak"]["bytes"] == 416 * MiB);
  REQUIRE(d["final_live_bytes"] == 160 * MiB);
  REQUIRE(d["apis"]["cuMemAlloc"]["calls"] == 64 + kIterations / 100);
  REQUIRE(d["apis"]["cuMemAllocAsync"]["calls"] == 6 * kIterations);
  REQUIRE(d["apis"]["cuMemFreeAsync"]["calls"] == 6 * kIterations);
  const json& p = r["processes"][0];
  REQUIRE(p["clean_exit"] == true);
  REQUIRE(p["dropped_events"] == 0);
  REQUIRE(p["devices"][0]["launches"]["count"] == 20 * kIterations);
}

// The figures of a report that do not depend on times or addresses.
json figures(const json& r) {
  const json& d = r["devices"][0];
  json leaks = json::array();
  for (const json& l : r["leaks"])
    leaks.push_back({l["bytes"], l["count"], l["site"], l["library"], l["sizes"]});
  return {d["peak"]["bytes"],
          d["peak"]["live_allocations"],
          d["final_live_bytes"],
          d["apis"],
          leaks,
          r["processes"][0]["dropped_events"],
          r["processes"][0]["devices"][0]["launches"]["count"],
          r["processes"][0]["devices"][0]["launches"]["top"]};
}

}  // namespace

TEST_CASE(
    "compressed traces: same events and exact figures as raw ones, off and no libzstd give raw "
    "frames") {
  std::string dir = temp_dir();
  const std::string run = "cd " + dir + " && " + kEnv + "LD_PRELOAD=" + kLib + " ";
  const std::string args = " " + prog("bench_mix") + " " + std::to_string(kIterations);
  struct Variant {
    const char* name;
    std::string env;
  };
  const Variant variants[] = {
      {"auto", "VRAMTRACE_COMPRESS=auto "},
      {"default", ""},
      {"off", "VRAMTRACE_COMPRESS=off "},
      {"nolib", "VRAMTRACE_ZSTD_LIB=/nonexistent/libzstd.so.1 "},
  };
  std::map<std::string, Read> reads;
  std::map<std::string, json> reports;
  std::map<std::string, size_t> sizes;
  for (const Variant& v : variants) {
    INFO(v.name);
    const std::string trace = dir + "/" + v.name + ".vtrace";
    Result r = sh(run + v.env + "VRAMTRACE_OUTPUT=" + trace + args);
    INFO(r.out);
    REQUIRE(r.code() == 0);
    // Nothing of ours on the target's output, compressed or not, libzstd or not.
    REQUIRE(r.out.rfind("bench_mix: " + std::to_string(kIterations) + " iterations\nwriter_cpu_ns=",
                        0) == 0);
    REQUIRE_FALSE(contains(r.out, "vramtrace"));
    Frames f = frames_of(trace);
    if (v.env.empty() || contains(v.env, "auto")) {
      // Nearly every record is in a compressed frame, those of the last frame too (the writer
      // thread writes it at exit).
      REQUIRE(f.zstd >= 1);
      REQUIRE(f.zstd_records >= 9 * (f.zstd_records + f.raw_records) / 10);
    } else {
      REQUIRE(f.zstd == 0);
      REQUIRE(f.raw >= 1);
    }
    reads[v.name] = read_trace(trace);
    // Every record the library counted is in the file: none lost at the hand-over at exit.
    REQUIRE(reads[v.name].records == reads[v.name].exit_says);
    reports[v.name] = report_of(trace, dir + "/out-" + v.name);
    check_figures(reports[v.name]);
    sizes[v.name] = slurp(trace).size();
  }
  for (const char* other : {"default", "off", "nolib"}) {
    INFO(other);
    REQUIRE(reads[other].ops == reads["auto"].ops);
    REQUIRE(figures(reports[other]) == figures(reports["auto"]));
  }
  REQUIRE(reads["auto"].ops.size() >= 32 * kIterations);
  REQUIRE(sizes["auto"] * 3 < sizes["off"]);
}

TEST_CASE("vramtrace run: the streams over the socket are compressed too, and reported exactly") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("bench_mix") + " " +
                std::to_string(kIterations));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  check_figures(json::parse(slurp(dir + "/report.json")));
  std::vector<std::string> traces = traces_in(dir);
  REQUIRE(traces.size() == 1);
  Frames f = frames_of(traces[0]);
  REQUIRE(f.zstd >= 1);
  Read read = read_trace(traces[0]);
  REQUIRE(read.records == read.exit_says);
}

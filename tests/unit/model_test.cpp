// Unit tests of the collector's arithmetic: peak, live set at the peak, VMM, OOM, leaks,
// pinned host memory, multi-process device totals, and the JSON report's contract keys.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>

#include "collector/model/model.h"
#include "report/json_report.h"
#include "unit/run_of.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::Api;
using vt_test::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;

using vt_test::run_of;

std::vector<uint64_t> sizes(const std::vector<collector::Allocation>& v) {
  std::vector<uint64_t> out;
  for (auto& a : v) out.push_back(a.bytes);
  return out;
}

}  // namespace

TEST_CASE("peak, live set at the peak, final live bytes and leaks") {
  TraceBuilder b;
  b.context(0, 80 * 1024 * MiB, "Test GPU")
      .alloc(0xa, 1 * MiB)
      .alloc(0xb, 2 * MiB)
      .alloc(0xc, 4 * MiB)
      .free(0xb)
      .alloc(0xd, 8 * MiB)  // peak: 13 MiB
      .free(0xd)
      .free(0xc)
      .exit_clean();
  collector::Run run = run_of({b.bytes()});
  REQUIRE(run.processes.size() == 1);
  const auto& p = run.processes[0];
  const auto& d = p.devices.at(0);
  REQUIRE(d.memory.peak_bytes() == 13 * MiB);
  REQUIRE(d.memory.peak_time() == TraceBuilder::start_ + 6 * 1000);
  REQUIRE(sizes(d.live_at_peak) == std::vector<uint64_t>{8 * MiB, 4 * MiB, 1 * MiB});
  REQUIRE(d.memory.live_bytes() == 1 * MiB);
  REQUIRE(d.allocations == 4);
  REQUIRE(d.frees == 3);
  REQUIRE(p.clean_exit);

  auto j = report::to_json(run);
  REQUIRE(j["schema"] == "vramtrace.report/1");
  REQUIRE(j["devices"][0]["index"] == 0);
  REQUIRE(j["devices"][0]["name"] == "Test GPU");
  REQUIRE(j["devices"][0]["total_bytes"] == 80 * 1024 * MiB);
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 13 * MiB);
  REQUIRE(j["devices"][0]["peak"]["time_ns"] == 6 * 1000);
  REQUIRE(j["devices"][0]["peak"]["live_allocations"] == 3);
  REQUIRE(j["devices"][0]["final_live_bytes"] == 1 * MiB);
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["bytes"] == 1 * MiB);
  REQUIRE(j["leaks"][0]["count"] == 1);
  REQUIRE(j["leaks"][0]["site"] == "cuMemAlloc");
  REQUIRE(j["oom"].empty());
  REQUIRE(j["run"]["complete"] == true);
}

TEST_CASE("a higher peak later replaces the live set of an earlier one") {
  TraceBuilder b;
  b.alloc(0xa, 10).free(0xa).alloc(0xb, 5).alloc(0xc, 6).free(0xb).free(0xc);
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.memory.peak_bytes() == 11);
  REQUIRE(sizes(d.live_at_peak) == std::vector<uint64_t>{6, 5});
  REQUIRE(d.memory.live_bytes() == 0);
}

TEST_CASE("an OOM keeps the request, the live bytes and the driver's free memory") {
  TraceBuilder b;
  b.context(0, 64 * MiB)
      .alloc(0xa, 48 * MiB)
      .failed(32 * MiB)
      .meminfo(16 * MiB, 64 * MiB)
      .failed(7, 1)
      .free(0xa);
  auto run = run_of({b.bytes()});
  const auto& p = run.processes[0];
  REQUIRE(p.ooms.size() == 1);
  REQUIRE(p.ooms[0].requested_bytes == 32 * MiB);
  REQUIRE(p.ooms[0].live_bytes == 48 * MiB);
  REQUIRE(*p.ooms[0].free_bytes == 16 * MiB);
  REQUIRE(p.failures_by_result.at(1) == 1);  // a non-OOM failure is counted apart
  auto j = report::to_json(run);
  REQUIRE(j["oom"][0]["device"] == 0);
  REQUIRE(j["oom"][0]["requested_bytes"] == 32 * MiB);
  REQUIRE(j["oom"][0]["time_ns"] == 3000);
  REQUIRE(j["oom"][0]["free_bytes"] == 16 * MiB);
  REQUIRE(j["run"]["complete"] == false);  // no ProcessExit: cut short
}

TEST_CASE("VMM memory counts once per handle and stays while mapped after release") {
  TraceBuilder b;
  b.vmm_create(77, 2 * MiB)
      .vmm_map(0x100000, 1 * MiB, 77)
      .vmm_map(0x200000, 1 * MiB, 77)
      .vmm_release(77);
  auto mid = run_of({TraceBuilder(b).bytes()});
  REQUIRE(mid.processes[0].devices.at(0).memory.live_bytes() == 2 * MiB);
  b.vmm_unmap(0x100000, 1 * MiB);
  auto one = run_of({TraceBuilder(b).bytes()});
  REQUIRE(one.processes[0].devices.at(0).memory.live_bytes() == 2 * MiB);
  b.vmm_unmap(0x200000, 1 * MiB);
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.memory.live_bytes() == 0);
  REQUIRE(d.memory.peak_bytes() == 2 * MiB);
}

TEST_CASE("pinned host memory is reported apart from device memory") {
  TraceBuilder b;
  b.alloc(0x1, 4096, Api::cuMemAllocHost).alloc(0xa, 100).free(0x1, Api::cuMemFreeHost);
  auto run = run_of({b.bytes()});
  const auto& p = run.processes[0];
  REQUIRE(p.devices.at(0).memory.peak_bytes() == 100);
  REQUIRE(p.pinned_host.peak_bytes() == 4096);
  REQUIRE(p.pinned_host.live_bytes() == 0);
}

TEST_CASE("frees of unknown addresses and reused addresses do not corrupt the totals") {
  TraceBuilder b;
  b.free(0x999).alloc(0xa, 100).alloc(0xa, 50);  // the free of the first 0xa was lost
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.unmatched_frees == 1);
  REQUIRE(d.replaced_without_free == 1);
  REQUIRE(d.memory.live_bytes() == 50);
}

TEST_CASE("array handles and device addresses do not collide") {
  TraceBuilder b;
  b.alloc(0xa, 100).alloc(0xa, 30, Api::cuArrayCreate).free(0xa, Api::cuArrayDestroy);
  auto run = run_of({b.bytes()});
  REQUIRE(run.processes[0].devices.at(0).memory.live_bytes() == 100);
}

TEST_CASE("two processes on one device: the device's peak is their sum at one moment") {
  TraceBuilder a(1), c(2);
  a.step(1000).alloc(0xa, 10 * MiB).step(5000).free(0xa);   // live from t+1000 to t+6000
  c.step(2000).alloc(0xb, 20 * MiB).step(10000).free(0xb);  // live from t+2000 to t+12000
  auto run = run_of({a.bytes(), c.bytes()});
  REQUIRE(run.devices.size() == 1);
  REQUIRE(run.devices[0].peak_bytes == 30 * MiB);
  REQUIRE(run.devices[0].peak_time_ns == TraceBuilder::start_ + 2000);
  REQUIRE(run.devices[0].peak_by_pid.at(1) == 10 * MiB);
  REQUIRE(run.devices[0].peak_by_pid.at(2) == 20 * MiB);
}

TEST_CASE("the downsampled timeline keeps the exact peak") {
  collector::Timeline t(64);
  for (uint64_t i = 0; i < 100000; ++i) t.add(i * 10, i == 54321 ? 999999 : i % 1000);
  REQUIRE(t.points().size() <= 64);
  uint64_t max = 0;
  for (auto& p : t.points()) max = std::max(max, p.max_bytes);
  REQUIRE(max == 999999);
  REQUIRE(t.points().back().last_bytes == 99999 % 1000);
}

TEST_CASE("the downsampled timeline keeps each bucket's lowest and highest at their moments") {
  collector::Timeline t(64);
  for (uint64_t i = 0; i < 100000; ++i)
    t.add(i * 10, i == 54321 ? 999999 : i == 12345 ? 7 : 1000 + i % 1000);
  REQUIRE(t.points().size() <= 64);
  size_t peaks = 0, dips = 0;
  for (const auto& p : t.points()) {
    REQUIRE(p.min_bytes <= p.last_bytes);
    REQUIRE(p.last_bytes <= p.max_bytes);
    REQUIRE(p.min_ns >= p.time_ns);
    REQUIRE(p.max_ns < p.time_ns + t.bucket_ns());
    if (p.max_bytes == 999999) {
      ++peaks;
      REQUIRE(p.max_ns == 543210);
    }
    if (p.min_bytes == 7) {
      ++dips;
      REQUIRE(p.min_ns == 123450);
    }
  }
  REQUIRE(peaks == 1);
  REQUIRE(dips == 1);
  // Every other bucket's lowest is the first 1000 in it (i % 1000 == 0), its highest 1999.
  REQUIRE(t.points()[1].min_bytes == 1000);
  REQUIRE(t.points()[1].max_bytes == 1999);
}

TEST_CASE("launches of kernel ids past the dense range are counted too") {
  TraceBuilder b;
  b.kernel(7, "small").kernel(5000, "large").kernel(4000000000u, "huge");
  b.launch(5000).launch(7).launch(4000000000u).launch(5000).launch(0).launch(5000, 1);
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.launches_by_kernel.of(7) == 1);
  REQUIRE(d.launches_by_kernel.of(5000) == 2);
  REQUIRE(d.launches_by_kernel.of(4000000000u) == 1);
  REQUIRE(d.launches_by_kernel.of(0) == 1);
  REQUIRE(d.launches_by_kernel.of(8) == 0);
  REQUIRE(d.launches_by_kernel.distinct() == 4);
  REQUIRE(run.processes[0].devices.at(1).launches_by_kernel.distinct() == 1);
  auto j = report::to_json(run);
  auto& l = j["processes"][0]["devices"][0]["launches"];
  REQUIRE(l["distinct_kernels"] == 4);
  REQUIRE(l["top"][0]["name"] == "large");
  REQUIRE(l["top"][0]["launches"] == 2);
  REQUIRE(l["top"][1]["name"] == "(graph launch)");  // ties by id
  REQUIRE(l["top"][2]["name"] == "small");
  REQUIRE(l["top"][3]["name"] == "huge");
}

TEST_CASE("kernel launches are counted by name and the last kernel before the peak is kept") {
  TraceBuilder b;
  b.kernel(1, "_Z4fillIfEvPT_S0_i")
      .launch(1)
      .launch(1)
      .kernel(2, "other")
      .launch(2)
      .alloc(0xa, 100)
      .launch(1);
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.launches == 4);
  REQUIRE(d.launches_by_kernel.of(1) == 3);
  REQUIRE(d.launches_by_kernel.of(2) == 1);
  REQUIRE(d.launches_by_kernel.distinct() == 2);
  REQUIRE(d.kernel_at_peak == 2);
  auto j = report::to_json(run);
  auto& k = j["processes"][0]["devices"][0]["launches"]["top"][0];
  REQUIRE(k["name"] == "void fill<float>(float*, float, int)");
  REQUIRE(k["launches"] == 3);
  REQUIRE(j["devices"][0]["peak"]["last_kernel"] == "other");
}

TEST_CASE(
    "launches off: a Settings record makes launch counts and the kernel at the peak unknown, not "
    "0") {
  TraceBuilder b;
  b.settings({0})
      .context(0, 1ull << 30)
      .alloc(0xa, 4 * MiB)
      .alloc(0xb, 8 * MiB)
      .free(0xa)
      .exit_clean();
  auto run = run_of({b.bytes()});
  REQUIRE_FALSE(run.processes[0].launches_recorded);
  auto j = report::to_json(run);
  const auto& p = j["processes"][0];
  REQUIRE(p["launches"]["recorded"] == false);
  REQUIRE(p["launches"]["note"] ==
          "kernel launches were not recorded (--launches=off, VRAMTRACE_LAUNCHES=off): launch "
          "counts, the kernel at the peak and iterations found by the launch rhythm are unknown");
  REQUIRE(p["devices"][0]["launches"] == nlohmann::json{{"recorded", false}});
  REQUIRE_FALSE(p["devices"][0]["peak"].contains("last_kernel"));
  REQUIRE_FALSE(j["devices"][0]["peak"].contains("last_kernel"));
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 12 * MiB);  // memory as ever
  REQUIRE(p["devices"][0]["allocations"] == 2);
  REQUIRE_THAT(report::summary_text(j),
               Catch::Contains("vramtrace: NOTE: kernel launches not recorded (--launches=off): "
                               "no launch counts, no kernel at the peak, no iterations from the "
                               "launch rhythm\n"));

  // A trace from before Settings existed, {1}, and a record of no fields: launches recorded.
  TraceBuilder old_trace, on, empty;
  old_trace.kernel(1, "k").launch(1).alloc(0xa, 100).exit_clean();
  on.settings({1}).kernel(1, "k").launch(1).alloc(0xa, 100).exit_clean();
  empty.settings({}).kernel(1, "k").launch(1).alloc(0xa, 100).exit_clean();
  for (TraceBuilder* t : {&old_trace, &on, &empty}) {
    auto r = run_of({t->bytes()});
    REQUIRE(r.processes[0].launches_recorded);
    REQUIRE(r.processes[0].problem.empty());
    auto jj = report::to_json(r);
    REQUIRE(jj["processes"][0]["launches"] == nlohmann::json{{"recorded", true}});
    REQUIRE(jj["processes"][0]["devices"][0]["launches"]["count"] == 1);
    REQUIRE(jj["processes"][0]["devices"][0]["launches"]["recorded"] == true);
    REQUIRE(jj["devices"][0]["peak"]["last_kernel"] == "k");
    REQUIRE_THAT(report::summary_text(jj), !Catch::Contains("launches not recorded"));
  }
}

TEST_CASE(
    "launches stopped in a running process: counted until then, no kernel before what follows") {
  TraceBuilder b;
  b.context(0, 1ull << 30)
      .kernel(1, "k")
      .kernel(2, "late")
      .launch(1)
      .alloc(0xa, 4 * MiB)  // after k
      .launch(1)
      .add(format::rec::LaunchesStopped{1})
      .launch(2)  // recorded by a thread while the ids went off: past the stop, not counted
      .alloc(0xb, 8 * MiB)  // the peak, after the stop
      .exit_clean();
  auto run = run_of({b.bytes()});
  const auto& proc = run.processes[0];
  REQUIRE(proc.launches_recorded);
  REQUIRE(proc.launches_stopped_ns > 0);
  REQUIRE(proc.launches_stop_reason == 1);
  auto j = report::to_json(run);
  const auto& p = j["processes"][0];
  REQUIRE(p["launches"]["recorded"] == true);
  REQUIRE(p["launches"]["stopped_ns"] == p["devices"][0]["launches"]["stopped_ns"]);
  REQUIRE_THAT(p["launches"]["note"].get<std::string>(),
               Catch::Contains("(vramtrace run --launches=on records them all)"));
  REQUIRE(p["devices"][0]["launches"]["count"] == 2);
  REQUIRE(p["devices"][0]["launches"]["top"].size() == 1);
  // The peak came after the stop: its kernel is unknown; the first block's is known.
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 12 * MiB);
  REQUIRE_FALSE(j["devices"][0]["peak"].contains("last_kernel"));
  bool first_seen = false;
  for (const auto& a : p["devices"][0]["peak"]["largest"]) {
    if (a["bytes"] == 4 * MiB) {
      first_seen = true;
      REQUIRE(a["last_kernel"] == "k");
    } else {
      REQUIRE_FALSE(a.contains("last_kernel"));
    }
  }
  REQUIRE(first_seen);
  // The program's own stop (reason 0) is told apart.
  TraceBuilder own;
  own.kernel(1, "k").launch(1).add(format::rec::LaunchesStopped{0}).alloc(0xa, 100).exit_clean();
  auto jo = report::to_json(run_of({own.bytes()}));
  REQUIRE_THAT(jo["processes"][0]["launches"]["note"].get<std::string>(),
               Catch::Contains("the program stopped their recording"));
}

TEST_CASE("a Settings record: later fields are skipped, a bad value or field count is corrupt") {
  // Fields a later library appends are read past: the records after it are still decoded.
  TraceBuilder later;
  later.settings({0, 7, 1ull << 40}).alloc(0xa, 100).exit_clean();
  auto r = run_of({later.bytes()});
  REQUIRE_FALSE(r.processes[0].launches_recorded);
  REQUIRE(r.processes[0].problem.empty());
  REQUIRE(r.processes[0].devices.at(0).memory.peak_bytes() == 100);
  REQUIRE(r.processes[0].clean_exit);

  // Launches is 0 or 1; more than format::kMaxSettings fields is corruption.
  TraceBuilder two;
  two.alloc(0xa, 100).settings({2}).alloc(0xb, 100);
  auto bad = collector::TraceReader::from_bytes(two.bytes());
  int events = 0;
  while (bad->next()) ++events;
  REQUIRE(events == 2);  // Process, the first Alloc
  REQUIRE(bad->problem() == "corrupt record in frame 1 (type 30)");

  // A version 1 stream (no checksum), so that a record can be appended to its frame by hand.
  std::vector<uint8_t> many = TraceBuilder().format_version(1).alloc(0xa, 100).bytes();
  // Append a Settings record of 65 fields to the frame by hand, and count it in the header.
  std::vector<uint8_t> rec = {static_cast<uint8_t>(format::RecordType::Settings), 65};
  rec.insert(rec.end(), 65, 1);
  format::FrameHeader h;
  const size_t at = sizeof(format::FileHeader);
  std::memcpy(&h, many.data() + at, sizeof h);
  h.stored_bytes = h.raw_bytes = h.raw_bytes + static_cast<uint32_t>(rec.size());
  ++h.record_count;
  std::memcpy(many.data() + at, &h, sizeof h);
  many.insert(many.end(), rec.begin(), rec.end());
  auto r2 = collector::TraceReader::from_bytes(many);
  events = 0;
  while (r2->next()) ++events;
  REQUIRE(events == 2);
  REQUIRE(r2->problem() == "corrupt record in frame 1 (type 30)");
}

TEST_CASE("launches off in one process of two: the summary names it") {
  TraceBuilder a(100, "testhost", ""), b(101, "testhost", "");
  a.context(0, 1ull << 30).alloc(0x1000, 4096).exit_clean();
  b.settings({0}).context(0, 1ull << 30).alloc(0x2000, 4096).exit_clean();
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(a.bytes()));
  readers.push_back(collector::TraceReader::from_bytes(b.bytes()));
  auto j = report::to_json(collector::model_of(std::move(readers)));
  REQUIRE_THAT(report::summary_text(j),
               Catch::Contains("vramtrace: NOTE: kernel launches not recorded in pid 101 "
                               "(--launches=off): no launch counts, no kernel at the peak, no "
                               "iterations from the launch rhythm\n"));
  // Two processes on one device: the run-wide device has no single process's kernel at the
  // peak either way.
  REQUIRE(j["devices"].size() == 1);
  REQUIRE_FALSE(j["devices"][0]["peak"].contains("last_kernel"));
}

TEST_CASE(
    "a stream-ordered pool's footprint: reserved beyond its allocations, peak from the high-water "
    "mark") {
  TraceBuilder b;
  b.alloc(0xa, 10 * MiB)                          // a plain allocation
      .alloc(0xb, 1 * MiB, Api::cuMemAllocAsync)  // from the pool
      .pool(0x77, 32 * MiB, 1 * MiB, 32 * MiB)    // the pool reserved 32 MiB for it
      .free(0xb, Api::cuMemFreeAsync)
      .pool(0x77, 32 * MiB, 0, 48 * MiB);  // between answers it had reached 48 MiB
  auto run = run_of({b.bytes()});
  const auto& d = run.processes[0].devices.at(0);
  REQUIRE(d.memory.peak_bytes() == 11 * MiB);  // in use
  REQUIRE(d.pools.at(0x77).peak_reserved == 48 * MiB);
  REQUIRE(d.footprint() == 10 * MiB + 32 * MiB);  // now: plain + what the pool keeps
  REQUIRE(d.footprint_peak == 10 * MiB + 48 * MiB);
  auto j = report::to_json(run);
  REQUIRE(j["processes"][0]["devices"][0]["reserved"]["peak_bytes"] == 58 * MiB);
  REQUIRE(j["processes"][0]["devices"][0]["pools"][0]["peak_reserved_bytes"] == 48 * MiB);
}

// A native loop of one kernel per iteration, as tests/gpu/real/native_growth.cu: 16 MiB of
// scratch around the launch, then 64 MiB kept.
static void native_iterations(TraceBuilder& b, int n, uint32_t kernel = 1) {
  for (int i = 0; i < n; ++i)
    b.alloc(0x100000000ull + 0x10000000ull * i, 16 * MiB)
        .launch(kernel)
        .free(0x100000000ull + 0x10000000ull * i)
        .alloc(0x900000000ull + 0x10000000ull * i, 64 * MiB);
}

TEST_CASE("the launch rhythm: one kernel per iteration marks iterations, a burst of one does not") {
  SECTION("one kernel per iteration, memory allocated between launches") {
    TraceBuilder b;
    b.context(0, 80 * 1024 * MiB).kernel(1, "step");
    native_iterations(b, 40);
    b.exit_clean();
    auto run = run_of({b.bytes()});
    const auto& p = run.processes[0];
    REQUIRE(p.iterations.size() == 40);
    REQUIRE(p.iteration_source == "kernel");
    REQUIRE(p.iteration_period == 1);
    REQUIRE(p.kernel_name(p.iteration_kernel) == "step");
    auto j = report::to_json(run);
    REQUIRE(j["processes"][0]["iterations"]["count"] == 40);
    REQUIRE(j["processes"][0]["iterations"]["source"] == "kernel step (every launch)");
    REQUIRE(j["growth"].size() == 1);
    REQUIRE(j["growth"][0]["bytes_per_iteration"] == 64 * MiB);
    REQUIRE(j["growth"][0]["iterations"] == 40);
    REQUIRE(j["growth"][0]["first_iteration"] == 0);
    REQUIRE(j["growth"][0]["last_iteration"] == 39);
    REQUIRE(j["growth"][0]["bytes"] == 40 * 64 * MiB);
  }
  SECTION("a burst of one kernel, nothing allocated between its launches") {
    TraceBuilder b;
    b.context(0, 80 * 1024 * MiB).kernel(2, "fill").alloc(0xa, 64 * MiB);
    for (int i = 0; i < 50; ++i) b.launch(2);
    b.alloc(0xb, 64 * MiB).free(0xa).exit_clean();
    auto run = run_of({b.bytes()});
    REQUIRE(run.processes[0].iterations.empty());
    REQUIRE(run.processes[0].iteration_source.empty());
  }
  SECTION("a start-up loop of one kernel per buffer that stops long before the end") {
    // 50 buffers made and filled one by one (more than half of the launches), then 40 launches
    // of another kernel in a burst: no iterations, rather than 50 false ones.
    TraceBuilder b;
    b.context(0, 80 * 1024 * MiB).kernel(2, "fill").kernel(3, "work");
    for (int i = 0; i < 50; ++i) b.alloc(0x1000 + i, 1 * MiB).launch(2);
    for (int i = 0; i < 40; ++i) b.launch(3);
    b.exit_clean();
    auto run = run_of({b.bytes()});
    REQUIRE(run.processes[0].iterations.empty());
  }
  SECTION("a burst at start-up, then the loop: the loop's kernel marks the iterations") {
    TraceBuilder b;
    b.context(0, 80 * 1024 * MiB).kernel(1, "step").kernel(2, "fill");
    for (int i = 0; i < 30; ++i) b.launch(2);
    native_iterations(b, 40);
    b.exit_clean();
    auto run = run_of({b.bytes()});
    const auto& p = run.processes[0];
    REQUIRE(p.iterations.size() == 40);
    REQUIRE(p.kernel_name(p.iteration_kernel) == "step");
  }
}

TEST_CASE("the exit status: an OOM after which a native program exits non-zero is fatal") {
  auto oom_then = [](const std::function<void(TraceBuilder&)>& end) {
    TraceBuilder b;
    b.context(0, 1024 * MiB).kernel(1, "step");
    native_iterations(b, 3);
    b.alloc(0x5000, 16 * MiB).launch(1).free(0x5000).failed(64 * MiB);
    end(b);
    return run_of({b.bytes()});
  };
  SECTION("exit(3) right after the OOM: fatal, the verdict is oom") {
    auto run = oom_then([](TraceBuilder& b) { b.exit_with(3); });
    const auto& p = run.processes[0];
    REQUIRE(p.clean_exit);
    REQUIRE(p.exit_status == 3);
    REQUIRE(p.ooms.size() == 1);
    REQUIRE(p.ooms[0].fatal);
    auto j = report::to_json(run);
    REQUIRE(j["processes"][0]["exit_status"] == 3);
    REQUIRE(j["oom"][0]["fatal"] == true);
    REQUIRE(j["diagnosis"]["verdict"] == "oom");
    REQUIRE(j["diagnosis"]["fatal_ooms"] == 1);
  }
  SECTION("exit(0) (no record), or a trace from before the record: survived, verdict peak") {
    auto run = oom_then([](TraceBuilder& b) { b.exit_clean(); });
    REQUIRE_FALSE(run.processes[0].exit_status);
    REQUIRE_FALSE(run.processes[0].ooms[0].fatal);
    auto j = report::to_json(run);
    REQUIRE_FALSE(j["processes"][0].contains("exit_status"));
    REQUIRE(j["diagnosis"]["verdict"] == "peak");
    REQUIRE(j["diagnosis"]["recovered_ooms"] == 1);
  }
  SECTION("a zero status recorded all the same: survived") {
    auto run = oom_then([](TraceBuilder& b) { b.exit_with(0); });
    REQUIRE(run.processes[0].exit_status == 0);
    REQUIRE_FALSE(run.processes[0].ooms[0].fatal);
  }
  SECTION("no exit at all (a signal): fatal, as before") {
    auto run = oom_then([](TraceBuilder&) {});
    REQUIRE_FALSE(run.processes[0].clean_exit);
    REQUIRE(run.processes[0].ooms[0].fatal);
  }
  SECTION("a status no library writes is not taken") {
    auto run = oom_then([](TraceBuilder& b) { b.exit_with(256); });
    REQUIRE_FALSE(run.processes[0].exit_status);
    REQUIRE_FALSE(run.processes[0].ooms[0].fatal);
    REQUIRE(run.processes[0].problem.empty());
  }
}

TEST_CASE("one clock: the report's words count from the run's first CUDA work") {
  constexpr uint64_t GiB = 1ull << 30;
  // 12 s of imports before the first CUDA context; the peak 0.72 s after it.
  TraceBuilder b;
  b.step(12'000'000'000).context(0, 80 * GiB, "NVIDIA H200");
  b.step(720'000'000).alloc(0xa, 1 * GiB).step(1000).free(0xa).exit_clean();
  auto j = report::to_json(run_of({b.bytes()}));
  REQUIRE(j["run"]["cuda_start_ns"] == 12'000'000'000ull);
  REQUIRE(j["devices"][0]["peak"]["time_ns"] == 12'720'000'000ull);  // the keys: from the start
  REQUIRE_THAT(report::summary_text(j),
               Catch::Contains("vramtrace: device 0 (NVIDIA H200): peak 1.00 GiB of 80.00 GiB "
                               "(1.2%) 0.720 s after the first CUDA work; 0 B still live at the "
                               "end\n"));
  // Without a context record, the first allocation is the first CUDA work.
  TraceBuilder c;
  c.step(2'000'000'000).alloc(0xa, 1 * MiB).step(500'000'000).alloc(0xb, 1 * MiB).exit_clean();
  auto k = report::to_json(run_of({c.bytes()}));
  REQUIRE(k["run"]["cuda_start_ns"] == 2'000'000'000ull);
  REQUIRE_THAT(report::summary_text(k),
               Catch::Contains("peak 2.00 MiB 0.500 s after the first CUDA work; "));
  // A report written before the key existed: its times count from the start, and say so.
  j["run"].erase("cuda_start_ns");
  REQUIRE_THAT(report::summary_text(j), Catch::Contains("(1.2%) 12.720 s after the start; "));
}

TEST_CASE("a run without CUDA work has no clock of CUDA") {
  TraceBuilder b;
  b.exit_clean();
  auto j = report::to_json(run_of({b.bytes()}));
  REQUIRE_FALSE(j["run"].contains("cuda_start_ns"));
}

// End-to-end tests of --launches=off (VRAMTRACE_LAUNCHES=off), the low-overhead mode for
// launch-bound jobs: the launch callbacks are not enabled, allocations are recorded exactly as
// with the default, and the trace and the report say that launches were not recorded (not that
// there were none). A bad value: `vramtrace run` refuses it; the library keeps the default.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/ingest/trace_reader.h"
#include "common/format.h"
#include "e2e/e2e_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vramtrace;

namespace {

std::string only_trace(const std::string& dir) {
  std::vector<std::string> traces = traces_in(dir);
  REQUIRE(traces.size() == 1);
  return traces[0];
}

// Records of each type in a trace, and what its Settings record said (-1: none).
struct Records {
  std::map<format::RecordType, int> count;
  int launches_setting = -1;
};

Records records_of(const std::string& path) {
  collector::TraceReader r(path);
  Records out;
  collector::Record e;
  while (r.next(e)) {
    ++out.count[e.type];
    if (e.type == format::RecordType::Settings)
      out.launches_setting = static_cast<int>(e.settings.launches);
  }
  REQUIRE_FALSE(r.partial());
  return out;
}

// tests/programs/basic.cu's figures that do not depend on launches (as e2e_test.cpp checks).
void check_basic_memory(const json& r) {
  REQUIRE(r["devices"].size() == 1);
  const json& d = r["devices"][0];
  REQUIRE(d["peak"]["bytes"] == 13 * MiB);
  REQUIRE(d["peak"]["live_allocations"] == 3);
  REQUIRE(d["final_live_bytes"] == 1 * MiB);
  REQUIRE(d["apis"]["cuMemAlloc"]["calls"] == 4);
  REQUIRE(d["apis"]["cuMemAlloc"]["bytes"] == 15 * MiB);
  REQUIRE(d["apis"]["cuMemAlloc"]["freed"] == 3);
  REQUIRE(d["apis"]["cuMemFree"]["calls"] == 3);
  REQUIRE(r["leaks"].size() == 1);
  REQUIRE(r["leaks"][0]["bytes"] == 1 * MiB);
  REQUIRE(r["leaks"][0]["count"] == 1);
  REQUIRE(r["oom"].empty());
  const json& p = r["processes"][0];
  REQUIRE(p["clean_exit"] == true);
  REQUIRE(p["profiled"] == true);
  REQUIRE(p["dropped_events"] == 0);
  REQUIRE(p["pinned_host"]["peak_bytes"] == 64 * 1024);
}

void check_launches_off(const json& r) {
  check_basic_memory(r);
  const json& p = r["processes"][0];
  REQUIRE(p["launches"]["recorded"] == false);
  REQUIRE_THAT(p["launches"]["note"].get<std::string>(),
               Catch::StartsWith("kernel launches were not recorded (--launches=off"));
  const json& pd = p["devices"][0];
  REQUIRE(pd["launches"] == json{{"recorded", false}});  // no count: unknown, not 0
  REQUIRE_FALSE(pd["peak"].contains("last_kernel"));
  REQUIRE_FALSE(r["devices"][0]["peak"].contains("last_kernel"));
  REQUIRE(p["iterations"]["count"] == 0);
  for (const json& a : pd["peak"]["largest"]) REQUIRE_FALSE(a.contains("last_kernel"));
}

void check_launches_on(const json& r) {
  check_basic_memory(r);
  const json& p = r["processes"][0];
  REQUIRE(p["launches"] == json{{"recorded", true}});
  const json& launches = p["devices"][0]["launches"];
  REQUIRE(launches["recorded"] == true);
  REQUIRE(launches["count"] == 3);
  REQUIRE(launches["distinct_kernels"] == 1);
  REQUIRE(launches["top"][0]["name"] == "void fill<float>(float*, float, int)");
  REQUIRE(launches["top"][0]["launches"] == 3);
  REQUIRE(r["devices"][0]["peak"]["last_kernel"] == "void fill<float>(float*, float, int)");
}

const std::string kOffNote =
    "vramtrace: NOTE: kernel launches not recorded (--launches=off): no launch counts, no kernel "
    "at the peak, no iterations from the launch rhythm\n";

}  // namespace

TEST_CASE("run --launches=off: the same memory figures, no Launch record, recorded: false") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run --launches=off -o " + dir + " -- " + prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "basic done\n"));
  REQUIRE(contains(r.out, "peak 13.00 MiB"));
  REQUIRE(contains(r.out, kOffNote));
  check_launches_off(load_json(dir + "/report.json"));
  Records rec = records_of(only_trace(dir));
  REQUIRE(rec.count[format::RecordType::Launch] == 0);
  REQUIRE(rec.count[format::RecordType::Settings] == 1);
  REQUIRE(rec.launches_setting == 0);
  REQUIRE(rec.count[format::RecordType::Alloc] == 5);  // 4 cudaMalloc, 1 cudaMallocHost
  REQUIRE(rec.count[format::RecordType::Free] == 4);
  // The exit code is still the command's.
  Result three = sh(kEnv + kVramtrace + " run --force --launches off -o " + dir + " -- " +
                    prog("basic") + " 3");
  REQUIRE(three.code() == 3);
}

TEST_CASE("run with the default or --launches=on records launches as before") {
  for (std::string opt : {"", " --launches=on"}) {
    INFO("option: '" << opt << "'");
    std::string dir = temp_dir();
    Result r = sh(kEnv + kVramtrace + " run" + opt + " -o " + dir + " -- " + prog("basic"));
    INFO(r.out);
    REQUIRE(r.code() == 0);
    REQUIRE_FALSE(contains(r.out, "launches not recorded"));
    check_launches_on(load_json(dir + "/report.json"));
    Records rec = records_of(only_trace(dir));
    REQUIRE(rec.count[format::RecordType::Launch] == 3);
    // Default settings: no Settings record at all (older readers read such a trace).
    REQUIRE(rec.count[format::RecordType::Settings] == 0);
    REQUIRE(rec.launches_setting == -1);
  }
}

TEST_CASE("launches off: the launch callback ids are not enabled at all, the memory ids are") {
  std::string dir = temp_dir();
  Result off =
      sh(kEnv + kVramtrace + " run --launches=off -o " + dir + "/off -- " + prog("callback_state"));
  INFO(off.out);
  REQUIRE(off.code() == 0);
  REQUIRE(contains(off.out,
                   "memory callbacks enabled: 20 of 20\n"
                   "launch callbacks enabled: 0 of 8\n"));
  Result on = sh(kEnv + kVramtrace + " run -o " + dir + "/on -- " + prog("callback_state"));
  INFO(on.out);
  REQUIRE(on.code() == 0);
  REQUIRE(contains(on.out,
                   "memory callbacks enabled: 20 of 20\n"
                   "launch callbacks enabled: 8 of 8\n"));
  REQUIRE(load_json(dir + "/on/report.json")["processes"][0]["devices"][0]["launches"]["count"] ==
          2);
  REQUIRE(load_json(dir + "/off/report.json")["processes"][0]["launches"]["recorded"] == false);
}

TEST_CASE("VRAMTRACE_LAUNCHES=off on the LD_PRELOAD path, without the launcher") {
  std::string dir = temp_dir();
  Result r = sh("cd " + dir + " && " + kEnv + "VRAMTRACE_LAUNCHES=off LD_PRELOAD=" + kLib + " " +
                prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out == "basic done\n");  // nothing of ours on the target's output
  Records rec = records_of(only_trace(dir));
  REQUIRE(rec.count[format::RecordType::Launch] == 0);
  REQUIRE(rec.launches_setting == 0);
  Result rep = sh(kVramtrace + " report " + dir + " -o " + dir + "/out");
  INFO(rep.out);
  REQUIRE(rep.code() == 0);
  REQUIRE(contains(rep.out, kOffNote));
  check_launches_off(load_json(dir + "/out/report.json"));
}

TEST_CASE("a bad VRAMTRACE_LAUNCHES: one notice, launches recorded, the target untouched") {
  for (std::string value : {"maybe", "OFF", "0"}) {
    INFO("VRAMTRACE_LAUNCHES=" << value);
    std::string dir = temp_dir();
    Result r = sh("cd " + dir + " && " + kEnv + "VRAMTRACE_LAUNCHES=" + value +
                  " LD_PRELOAD=" + kLib + " " + prog("basic") + " 5");
    INFO(r.out);
    REQUIRE(r.code() == 5);
    REQUIRE(r.out == "vramtrace: VRAMTRACE_LAUNCHES=" + value +
                         " is not on or off; kernel launches are recorded (the default)\n"
                         "basic done\n");
    Records rec = records_of(only_trace(dir));
    REQUIRE(rec.count[format::RecordType::Launch] == 3);
    REQUIRE(rec.launches_setting == -1);
    Result rep = sh(kVramtrace + " report " + dir + " -o " + dir + "/out");
    REQUIRE(rep.code() == 0);
    check_launches_on(load_json(dir + "/out/report.json"));
  }
  // An empty value is the default, silently.
  std::string dir = temp_dir();
  Result r = sh("cd " + dir + " && " + kEnv + "VRAMTRACE_LAUNCHES= LD_PRELOAD=" + kLib + " " +
                prog("basic"));
  REQUIRE(r.out == "basic done\n");
  REQUIRE(records_of(only_trace(dir)).launches_setting == -1);  // no Settings record: the defaults
}

TEST_CASE("run --launches with a bad value is refused with exit 2 before the command runs") {
  std::string dir = temp_dir();
  for (std::string bad : {"--launches=maybe", "--launches OFF", "--launches="}) {
    INFO(bad);
    Result r = sh(kEnv + kVramtrace + " run " + bad + " -o " + dir + "/out -- " + prog("basic"));
    REQUIRE(r.code() == 2);
    REQUIRE(contains(r.out, "--launches: "));
    REQUIRE(contains(r.out, " not in {on,off}"));
    REQUIRE_FALSE(contains(r.out, "basic done"));
    REQUIRE_FALSE(fs::exists(dir + "/out"));
  }
}

namespace {

// py_torch_train.py --recover on the stand-in PyTorch (tests/programs/fake_torch), whose
// F.linear launches one kernel (fake_gemm): two launches a forward, fc1's and fc2's. Five
// forwards: iterations 0-2, iteration 3's that runs out of memory in fc2 (fc1's launch made,
// fc2's output not), and its retry.
json run_torch_train(const std::string& options, const std::string& dir, Records* records) {
  Result r = sh(kEnv + fake_torch_env() + " " + kVramtrace + " run" + options + " -o " + dir +
                " -- python3 " + VT_SOURCE_DIR + "/tests/programs/py_torch_train.py --recover");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "iteration 4 done"));
  *records = records_of(only_trace(dir));
  return load_json(dir + "/report.json");
}

// What the hook gives whether launches are recorded or not: four iterations from the
// optimizer's steps, thirteen phases, the recovered OOM in fc2 of iteration 3.
void check_torch_train(const json& j) {
  const json& p = j["processes"][0];
  REQUIRE(p["iterations"]["source"] == "optimizer.step()");
  REQUIRE(p["iterations"]["count"] == 4);
  const json& phases = p["devices"][0]["phases"];
  std::vector<std::string> got;
  for (const json& ph : phases) got.push_back(ph["phase"]);
  REQUIRE(got == std::vector<std::string>{"forward", "backward", "optimizer", "forward", "backward",
                                          "optimizer", "forward", "backward", "optimizer",
                                          "forward", "forward", "backward", "optimizer"});
  REQUIRE(j["oom"].size() == 1);
  REQUIRE(j["oom"][0]["module"] == "fc2");
  REQUIRE(j["oom"][0]["iteration"] == 3);
}

}  // namespace

TEST_CASE("a PyTorch process stops recording launches once the hook has marked two iterations") {
  std::string dir = temp_dir();
  Records rec;
  json j = run_torch_train("", dir + "/default", &rec);
  check_torch_train(j);
  // Stopped at the end of the second optimizer step: iterations 0 and 1's four launches.
  REQUIRE(rec.count[format::RecordType::LaunchesStopped] == 1);
  REQUIRE(rec.count[format::RecordType::Launch] == 4);
  REQUIRE(rec.count[format::RecordType::Settings] == 0);  // not --launches=off
  const json& p = j["processes"][0];
  REQUIRE(p["launches"]["recorded"] == true);
  REQUIRE_THAT(p["launches"]["note"].get<std::string>(),
               Catch::StartsWith("kernel launches were recorded until stopped_ns only: "
                                 "PyTorch's start-up hook marks this process's iterations"));
  const json& launches = p["devices"][0]["launches"];
  REQUIRE(launches["count"] == 4);
  REQUIRE(launches["top"][0]["name"] == "fake_gemm");
  REQUIRE(launches["stopped_ns"] == p["launches"]["stopped_ns"]);
  // Stopped during iteration 1's step: after its backward, before iteration 2's forward.
  const json& phases = p["devices"][0]["phases"];
  const uint64_t stopped = p["launches"]["stopped_ns"];
  REQUIRE(phases[4]["end_ns"].get<uint64_t>() <= stopped);
  REQUIRE(stopped <= phases[6]["start_ns"].get<uint64_t>());
  // The OOM and the peak came after: the kernel before them is unknown, not absent.
  REQUIRE_FALSE(j["oom"][0].contains("last_kernel"));
  REQUIRE_FALSE(p["devices"][0]["peak"].contains("last_kernel"));

  // --launches=on: every launch, all run long, the same iterations and phases.
  Records on;
  json all = run_torch_train(" --launches=on", dir + "/on", &on);
  check_torch_train(all);
  REQUIRE(on.count[format::RecordType::LaunchesStopped] == 0);
  REQUIRE(on.count[format::RecordType::Launch] == 9);  // 2 x 4 forwards, and fc1's before the OOM
  REQUIRE(all["processes"][0]["launches"] == json{{"recorded", true}});
  REQUIRE(all["processes"][0]["devices"][0]["launches"]["count"] == 9);
  REQUIRE(all["oom"][0]["last_kernel"] == "fake_gemm");
}

TEST_CASE("a native program keeps recording launches: no LaunchesStopped record") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  Records rec = records_of(only_trace(dir));
  REQUIRE(rec.count[format::RecordType::Launch] == 3);
  REQUIRE(rec.count[format::RecordType::LaunchesStopped] == 0);
  json j = load_json(dir + "/report.json");
  REQUIRE(j["processes"][0]["launches"] == json{{"recorded", true}});
  REQUIRE_FALSE(j["processes"][0]["devices"][0]["launches"].contains("stopped_ns"));
}

// End-to-end tests: purpose-built CUDA programs (tests/programs) run on the CPU stand-in, under
// `vramtrace run` and under plain LD_PRELOAD + `vramtrace report`; the reports must hold the
// exact figures each program is written to produce.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <regex>
#include <sstream>
#include <string>
#include "e2e/e2e_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const json& api(const json& device, const char* name) { return device["apis"][name]; }

void check_basic_report(const json& r) {
  REQUIRE(r["schema"] == "vramtrace.report/1");
  REQUIRE(r["run"]["stand_in"] == true);
  // Which CUPTI the process loaded: the stand-in's, by its file.
  const std::string cupti = r["processes"][0]["cupti_library"];
  REQUIRE(cupti.size() > 15);
  REQUIRE(cupti.compare(cupti.size() - 15, 15, "/libcupti.so.13") == 0);
  REQUIRE(r["devices"].size() == 1);
  const json& d = r["devices"][0];
  REQUIRE(d["index"] == 0);
  REQUIRE(d["name"].get<std::string>().find("stand-in") != std::string::npos);
  REQUIRE(d["total_bytes"] == 80ull * 1024 * MiB);
  REQUIRE(d["peak"]["bytes"] == 13 * MiB);
  REQUIRE(d["peak"]["live_allocations"] == 3);
  REQUIRE(d["final_live_bytes"] == 1 * MiB);
  REQUIRE(api(d, "cuMemAlloc")["calls"] == 4);
  REQUIRE(api(d, "cuMemAlloc")["bytes"] == 15 * MiB);
  REQUIRE(api(d, "cuMemAlloc")["freed"] == 3);
  REQUIRE(api(d, "cuMemFree")["calls"] == 3);
  REQUIRE(r["leaks"].size() == 1);
  REQUIRE(r["leaks"][0]["bytes"] == 1 * MiB);
  REQUIRE(r["leaks"][0]["count"] == 1);
  REQUIRE(r["oom"].empty());
  const json& p = r["processes"][0];
  REQUIRE(p["clean_exit"] == true);
  REQUIRE(p["dropped_events"] == 0);
  REQUIRE(p["pinned_host"]["peak_bytes"] == 64 * 1024);
  REQUIRE(p["pinned_host"]["final_live_bytes"] == 0);
  const json& launches = p["devices"][0]["launches"];
  REQUIRE(launches["count"] == 3);
  REQUIRE(launches["top"][0]["name"] == "void fill<float>(float*, float, int)");
  REQUIRE(launches["top"][0]["launches"] == 3);
}

}  // namespace

TEST_CASE("vramtrace run gives the exact peak, leaks, launches, output and exit code unchanged") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out.find("basic done") != std::string::npos);
  REQUIRE(r.out.find("peak 13.00 MiB") != std::string::npos);
  check_basic_report(load_json(dir + "/report.json"));
  REQUIRE(traces_in(dir).size() == 1);
  // Files are the user's alone.
  struct stat st {};
  REQUIRE(stat((dir + "/report.json").c_str(), &st) == 0);
  REQUIRE((st.st_mode & 0777) == 0600);

  // Into a folder of its own: `dir` holds the first run's output, which is not replaced.
  Result three = sh(kEnv + kVramtrace + " run -o " + temp_dir() + " -- " + prog("basic") + " 3");
  INFO(three.out);
  REQUIRE(three.code() == 3);
  REQUIRE(contains(three.out, "basic done"));
}

TEST_CASE("LD_PRELOAD alone writes a trace that vramtrace report turns into the same report") {
  std::string dir = temp_dir();
  Result r = sh("cd " + dir + " && " + kEnv + "LD_PRELOAD=" + kLib + " " + prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out == "basic done\n");  // nothing of ours on the target's output
  REQUIRE(traces_in(dir).size() == 1);
  Result rep = sh(kVramtrace + " report " + dir + " -o " + dir + "/out");
  INFO(rep.out);
  REQUIRE(rep.code() == 0);
  check_basic_report(load_json(dir + "/out/report.json"));

  // VRAMTRACE_OUTPUT names the file, %p the pid.
  std::string named = temp_dir();
  sh("cd /tmp && " + kEnv + "VRAMTRACE_OUTPUT=" + named + "/x.%p.vtrace LD_PRELOAD=" + kLib + " " +
     prog("basic"));
  REQUIRE(traces_in(named).size() == 1);
}

TEST_CASE("processes that never use CUDA write nothing") {
  std::string dir = temp_dir();
  Result r = sh("cd " + dir + " && LD_PRELOAD=" + kLib + " sh -c 'echo hello; ls >/dev/null'");
  REQUIRE(r.out == "hello\n");
  REQUIRE(traces_in(dir).size() == 0);
  Result run = sh(kEnv + kVramtrace + " run -o " + dir + "/out -- sh -c 'exit 4'");
  INFO(run.out);
  REQUIRE(run.code() == 4);
  REQUIRE(traces_in(dir + "/out").size() == 0);
  REQUIRE(load_json(dir + "/out/report.json")["devices"].empty());
}

TEST_CASE("an OOM is reported with the request, the live bytes and the free memory") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + "VRAMTRACE_STANDIN_DEVICE_BYTES=67108864 " + kVramtrace + " run -o " + dir +
                " -- " + prog("oom"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out.find("oom seen") != std::string::npos);
  json j = load_json(dir + "/report.json");
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE(o["device"] == 0);
  REQUIRE(o["requested_bytes"] == 32 * MiB);
  REQUIRE(o["live_bytes"] == 48 * MiB);
  REQUIRE(o["free_bytes"] == 16 * MiB);
  REQUIRE(o["total_bytes"] == 64 * MiB);
  REQUIRE(o["api"] == "cuMemAlloc");
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 48 * MiB);
  REQUIRE(j["devices"][0]["final_live_bytes"] == 0);
  REQUIRE(j["leaks"].empty());
}

TEST_CASE("every allocation path is accounted once: async, managed, pitch, VMM") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("apis"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("pitch_bytes=(\\d+)")));
  uint64_t pitch_bytes = std::stoull(m[1]);
  REQUIRE(std::regex_search(r.out, m, std::regex("vmm_bytes=(\\d+)")));
  uint64_t vmm_bytes = std::stoull(m[1]);
  json j = load_json(dir + "/report.json");
  const json& d = j["devices"][0];
  REQUIRE(api(d, "cuMemAllocAsync")["calls"] == 1);
  REQUIRE(api(d, "cuMemAllocAsync")["bytes"] == 1 * MiB);
  REQUIRE(api(d, "cuMemAllocAsync")["freed"] == 1);
  REQUIRE(api(d, "cuMemFreeAsync")["calls"] == 1);
  REQUIRE(api(d, "cuMemAllocManaged")["bytes"] == 2 * MiB);
  REQUIRE(api(d, "cuMemAllocPitch")["bytes"] == pitch_bytes);
  REQUIRE(api(d, "cuMemCreate")["bytes"] == vmm_bytes);
  REQUIRE(api(d, "cuMemCreate")["freed"] == 0);  // gone by unmap, not by a free call
  REQUIRE(api(d, "cuMemMap")["calls"] == 1);
  REQUIRE(api(d, "cuMemRelease")["calls"] == 1);
  REQUIRE(api(d, "cuMemUnmap")["calls"] == 1);
  REQUIRE(api(d, "cuMemAlloc")["calls"] == 1);
  uint64_t biggest = std::max({1 * MiB, 2 * MiB, pitch_bytes, vmm_bytes});
  REQUIRE(d["peak"]["bytes"] == 3 * MiB + biggest);
  REQUIRE(d["final_live_bytes"] == 3 * MiB);
}

TEST_CASE("a target that crashes still gets its report, marked as cut short") {
  std::string dir = temp_dir();
  SECTION("abort: vramtrace dies of the same signal") {
    Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("crash") + " abort");
    INFO(r.out);
    REQUIRE(r.died_of(SIGABRT));
  }
  SECTION("SIGKILL") {
    Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("crash") + " kill");
    INFO(r.out);
    REQUIRE(r.died_of(SIGKILL));
  }
  SECTION("_exit without exit handlers") {
    Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("crash") + " exit7");
    INFO(r.out);
    REQUIRE(r.code() == 7);
  }
  json j = load_json(dir + "/report.json");
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 5 * MiB);
  REQUIRE(j["processes"][0]["cut_short"] == true);
  REQUIRE(j["run"]["complete"] == false);
  REQUIRE(j["processes"][0]["devices"][0]["launches"]["count"] == 1);
}

TEST_CASE("16 threads allocating at once: every event, in a consistent order") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("threads"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(dir + "/report.json");
  const json& d = j["devices"][0];
  REQUIRE(api(d, "cuMemAlloc")["calls"] == 1616);
  REQUIRE(api(d, "cuMemFree")["calls"] == 1600);
  REQUIRE(d["final_live_bytes"] == 16 * MiB);
  REQUIRE(j["processes"][0]["devices"][0]["unmatched_frees"] == 0);
  REQUIRE(j["run"]["dropped_events"] == 0);
}

TEST_CASE("a fork after CUDA started neither hangs nor duplicates events") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + "timeout 60 " + kVramtrace + " run -o " + dir + " -- " + prog("forker"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out.find("child ran") != std::string::npos);
  REQUIRE(traces_in(dir).size() == 1);
  json j = load_json(dir + "/report.json");
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 2 * MiB);
  REQUIRE(j["processes"].size() == 1);
  REQUIRE(j["processes"][0]["clean_exit"] == true);
}

TEST_CASE("a forked copy's device queries are answered from the parent's values, in it alone") {
  std::string dir = temp_dir();
  Result r =
      sh(kEnv + "timeout 60 " + kVramtrace + " run -o " + dir + " -- " + prog("forked_copy"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(r.out.find("child: rebound some, device 5 (0), count 7 (0), set 5: 0, set 1: 101\n") !=
          std::string::npos);
  REQUIRE(r.out.find("parent: device 0, count 1, set 5: 101, child status 0\n") !=
          std::string::npos);
  // Without the library the program cannot ask for it.
  Result bare = sh(kEnv + "timeout 60 " + prog("forked_copy"));
  REQUIRE(bare.code() == 3);
}

TEST_CASE("CUPTI held by another tool: one line on stderr, the target runs untouched") {
  std::string dir = temp_dir();
  Result r =
      sh("cd " + dir + " && " + kEnv + "VRAMTRACE_STANDIN_CUPTI_BUSY=nsys LD_PRELOAD=" + kLib +
         " " + prog("basic") + " 5");
  INFO(r.out);
  REQUIRE(r.code() == 5);
  REQUIRE(r.out.find("basic done\n") != std::string::npos);
  std::regex notice("vramtrace: CUPTI is already held by another tool[^\n]*nsys[^\n]*\n");
  REQUIRE(std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), notice),
                        std::sregex_iterator()) == 1);
  REQUIRE(std::count(r.out.begin(), r.out.end(), '\n') == 2);
}

TEST_CASE("bad input and bad usage get a clear message and exit code 2") {
  std::string dir = temp_dir();
  std::ofstream(dir + "/junk.vtrace") << "this is not a trace at all";
  Result junk = sh(kVramtrace + " report " + dir + "/junk.vtrace -o " + dir);
  REQUIRE(junk.code() == 2);
  REQUIRE(junk.out.find("not a vramtrace trace") != std::string::npos);

  Result missing = sh(kVramtrace + " report " + dir + "/nothing.vtrace -o " + dir);
  REQUIRE(missing.code() == 2);
  REQUIRE(missing.out.find("no such file") != std::string::npos);

  REQUIRE(sh(kVramtrace + " run -o " + dir).code() == 2);
  REQUIRE(sh(kVramtrace + " frobnicate").code() == 2);
  Result nocmd = sh(kEnv + kVramtrace + " run -o " + dir + " -- /nonexistent/program");
  REQUIRE(nocmd.code() == 127);
  REQUIRE(nocmd.out.find("cannot run '/nonexistent/program'") != std::string::npos);

  // A trace cut off while a frame was being written gives a report of everything before that
  // frame, marked partial.
  std::string t = temp_dir();
  sh("cd " + t + " && " + kEnv + "VRAMTRACE_OUTPUT=" + t + "/a.vtrace LD_PRELOAD=" + kLib + " " +
     prog("basic"));
  {
    std::ofstream cut(t + "/a.vtrace", std::ios::app | std::ios::binary);
    cut.write("\x40\x00\x00\x00\x40\x00", 6);  // the first 6 bytes of a frame header
  }
  Result part = sh(kVramtrace + " report " + t + "/a.vtrace -o " + t);
  INFO(part.out);
  REQUIRE(part.code() == 0);
  json j = load_json(t + "/report.json");
  REQUIRE(j["run"]["complete"] == false);
  REQUIRE(j["run"]["problems"].size() == 1);
  REQUIRE(contains(j["run"]["problems"][0].get<std::string>(), "ends inside a frame header"));
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 13 * MiB);

  // Cut inside its only frame: nothing of it can be read, so there is no report to write (not
  // "no CUDA device memory was used"): exit 2, and the report already there stays as it was.
  fs::resize_file(t + "/a.vtrace", fs::file_size(t + "/a.vtrace") - 9);
  Result cut = sh(kVramtrace + " report --force " + t + "/a.vtrace -o " + t);
  INFO(cut.out);
  REQUIRE(cut.code() == 2);
  REQUIRE(contains(cut.out, "trace ends inside a frame at byte 16"));
  REQUIRE(contains(cut.out,
                   "vramtrace report: nothing could be read from the input: no report "
                   "written\n"));
  REQUIRE_FALSE(contains(cut.out, "no CUDA device memory was used"));
  json k = load_json(t + "/report.json");
  REQUIRE(k["devices"][0]["peak"]["bytes"] == 13 * MiB);
}

TEST_CASE("CUDA arrays are device memory of their descriptor's size") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("arrays"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(dir + "/report.json");
  const json& d = j["devices"][0];
  REQUIRE(api(d, "cuArrayCreate")["calls"] == 1);
  REQUIRE(api(d, "cuArrayCreate")["bytes"] == 256 * 256 * 4);
  REQUIRE(api(d, "cuArrayCreate")["freed"] == 1);
  REQUIRE(d["peak"]["bytes"] == 1 * MiB + 256 * 256 * 4);
  REQUIRE(d["final_live_bytes"] == 1 * MiB);
}

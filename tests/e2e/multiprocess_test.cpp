// End-to-end tests of process trees on the stand-in: forked workers, ranks started by a
// launcher script, and one report merged from several run directories.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "e2e/e2e_util.h"
#include "e2e/expected.h"

using nlohmann::json;

namespace {
std::string launcher() { return std::string(VT_SOURCE_DIR) + "/tests/programs/launch_ranks.sh"; }
}  // namespace

TEST_CASE("forked workers that use CUDA each stream on their own, the parent writes nothing") {
  std::string d = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + d + " -- " + prog("workers"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "workers done, 0 failed"));
  json j = load_json(d + "/report.json");
  REQUIRE(j["processes"].size() == 3);
  REQUIRE(j["devices"].size() == 1);
  expected::require_expected(j, "workers");  // the device's peak: all three live at once
  REQUIRE(j["devices"][0]["peak"]["by_process"].size() == 3);
  for (const auto& p : j["processes"]) REQUIRE(p["clean_exit"] == true);
  REQUIRE_FALSE(j.contains("ranks"));  // no launcher environment: no ranks
}

TEST_CASE("the device's peak over three workers: what each held then, by process, site, stack") {
  std::string d = temp_dir();
  Result r = sh(kEnv + kVramtrace + " run -o " + d + " -- " + prog("workers"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(d + "/report.json");
  const json& peak = j["devices"][0]["peak"];
  REQUIRE(peak["bytes"] == 48 * MiB);
  // By process: worker i held (i + 1) * 8 MiB, in one allocation, at the device's peak.
  std::map<uint64_t, uint64_t> pid_of_peak;  // each process's own peak -> its pid
  for (const auto& p : j["processes"]) pid_of_peak[p["devices"][0]["peak"]["bytes"]] = p["pid"];
  REQUIRE(pid_of_peak.size() == 3);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> by_process;  // pid -> (bytes, count)
  for (const auto& p : peak["by_process"]) by_process[p["pid"]] = {p["bytes"], p["count"]};
  REQUIRE(by_process.size() == 3);
  for (uint64_t mib : {8, 16, 24})
    REQUIRE(by_process[pid_of_peak[mib * MiB]] == std::make_pair(mib * MiB, uint64_t{1}));
  // By site: the three allocations come from the one line of the program: 48 MiB, 3 of them.
  REQUIRE(peak["live_allocations"] == 3);
  REQUIRE(peak["by_site"].size() == 1);
  REQUIRE(peak["by_site"][0]["bytes"] == 48 * MiB);
  REQUIRE(peak["by_site"][0]["count"] == 3);
  REQUIRE(peak["by_site"][0]["sizes"] == json::array({{{"bytes", 24 * MiB}, {"count", 1}},
                                                      {{"bytes", 16 * MiB}, {"count", 1}},
                                                      {{"bytes", 8 * MiB}, {"count", 1}}}));
  REQUIRE(peak["by_library"].size() == 1);
  REQUIRE(peak["by_library"][0]["library"] == "workers");
  REQUIRE(peak["by_library"][0]["bytes"] == 48 * MiB);
  // The same stack in each worker is one group.
  REQUIRE(peak["by_stack"].size() == 1);
  REQUIRE(peak["by_stack"][0]["bytes"] == 48 * MiB);
  REQUIRE(peak["by_stack"][0]["count"] == 3);
  REQUIRE(peak["by_stack"][0]["site"] == peak["by_site"][0]["site"]);
  // The largest allocations, each with its process.
  REQUIRE(peak["largest"].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const uint64_t bytes = (3 - i) * 8 * MiB;
    REQUIRE(peak["largest"][i]["bytes"] == bytes);
    REQUIRE(peak["largest"][i]["pid"] == pid_of_peak[bytes]);
  }
}

TEST_CASE("ranks started by a launcher are recognised: each rank's peak, the worst, the spread") {
  for (int n : {2, 4}) {
    std::string d = temp_dir();
    Result r = sh(kEnv + kVramtrace + " run -o " + d + " -- " + launcher() + " " +
                  std::to_string(n) + " " + prog("rank_alloc"));
    INFO(r.out);
    REQUIRE(r.code() == 0);
    json j = load_json(d + "/report.json");
    REQUIRE(j["ranks"].size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      REQUIRE(j["ranks"][i]["rank"] == i);
      REQUIRE(j["ranks"][i]["world_size"] == n);
      REQUIRE(j["ranks"][i]["peak_bytes"] == static_cast<uint64_t>(i + 1) * 16 * MiB);
    }
    REQUIRE(j["worst_rank"]["rank"] == n - 1);
    REQUIRE(j["worst_rank"]["peak_bytes"] == static_cast<uint64_t>(n) * 16 * MiB);
    REQUIRE(j["rank_imbalance"]["spread_bytes"] == static_cast<uint64_t>(n - 1) * 16 * MiB);
    double mean = (n + 1) / 2.0 * 16 * MiB;
    REQUIRE(j["rank_imbalance"]["max_over_mean"].get<double>() == Approx(n * 16.0 * MiB / mean));
    REQUIRE(contains(r.out, std::to_string(n) + " ranks; worst rank " + std::to_string(n - 1)));
    if (n == 4) expected::require_expected(j, "rank_alloc");  // the figures the GPU run checks
  }
}

TEST_CASE("one report merged from two run directories, checked per rank") {
  std::string a = temp_dir(), b = temp_dir(), merged = temp_dir();
  REQUIRE(
      sh(kEnv + "RANK=0 WORLD_SIZE=2 " + kVramtrace + " run -o " + a + " -- " + prog("rank_alloc"))
          .code() == 0);
  REQUIRE(
      sh(kEnv + "RANK=1 WORLD_SIZE=2 " + kVramtrace + " run -o " + b + " -- " + prog("rank_alloc"))
          .code() == 0);
  Result r = sh(kVramtrace + " report --merge " + a + " " + b + " -o " + merged);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(merged + "/report.json");
  REQUIRE(j["processes"].size() == 2);
  REQUIRE(j["ranks"].size() == 2);
  REQUIRE(j["worst_rank"]["rank"] == 1);
  REQUIRE(j["worst_rank"]["peak_bytes"] == 32 * MiB);

  // The merged run against itself with rank 1 doubled: the rank rows and the worst rank fail.
  json grown = j;
  for (auto& p : grown["processes"])
    if (p["ranks"]["RANK"] == "1") p["devices"][0]["peak"]["bytes"] = 64 * MiB;
  grown["worst_rank"]["peak_bytes"] = 64 * MiB;
  std::ofstream(merged + "/grown.json") << grown.dump();
  Result c = sh(kVramtrace + " check " + merged + "/grown.json --baseline " + merged +
                "/report.json --max-increase 10%");
  INFO(c.out);
  REQUIRE(c.code() == 1);
  REQUIRE(contains(c.out, "rank 1, device 0: baseline 32.00 MiB, candidate 64.00 MiB"));
  REQUIRE(contains(c.out,
                   "rank 0, device 0: baseline 16.00 MiB, candidate 16.00 MiB, +0 B "
                   "(+0.0%), budget +10% (up to 17.60 MiB): ok"));
  REQUIRE(
      contains(c.out, "worst rank (rank 1 -> rank 1): baseline 32.00 MiB, candidate 64.00 MiB"));
}

TEST_CASE("one process on two devices: a peak per device, and a budget per device") {
  std::string base = temp_dir(), cand = temp_dir();
  const std::string env = kEnv + "VRAMTRACE_STANDIN_DEVICES=2 ";
  Result r = sh(env + kVramtrace + " run -o " + base + " -- " + prog("two_devices"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(base + "/report.json");
  REQUIRE(j["devices"].size() == 2);
  REQUIRE(j["devices"][0]["index"] == 0);
  REQUIRE(j["devices"][1]["index"] == 1);
  expected::require_expected(j, "two_devices");
  REQUIRE(j["processes"][0]["devices"].size() == 2);

  REQUIRE(sh(env + "TWO_DEVICES_EXTRA_MIB=4 " + kVramtrace + " run -o " + cand + " -- " +
             prog("two_devices"))
              .code() == 0);
  Result c = sh(kVramtrace + " check " + cand + " --baseline " + base);
  INFO(c.out);
  REQUIRE(c.code() == 1);
  REQUIRE(contains(c.out,
                   "device 0 (vramtrace stand-in (CPU)): baseline 10.00 MiB, candidate 10.00 MiB"));
  REQUIRE(contains(c.out,
                   "device 1 (vramtrace stand-in (CPU)): baseline 20.00 MiB, candidate 24.00 MiB, "
                   "+4.00 MiB (+20.0%), budget +5% (up to 21.00 MiB): REGRESSION"));
  REQUIRE(
      sh(kVramtrace + " check " + cand + " --baseline " + base + " --max-increase 1:20%").code() ==
      0);
}

TEST_CASE("forks while another thread allocates: no hang, no events from the children") {
  std::string d = temp_dir();
  Result r = sh(kEnv + "timeout 120 " + kVramtrace + " run -o " + d + " -- " + prog("fork_storm"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("pairs=(\\d+)")));
  uint64_t pairs = std::stoull(m[1]);
  json j = load_json(d + "/report.json");
  REQUIRE(j["processes"].size() == 1);  // the children never wrote a stream
  const json& dev = j["devices"][0];
  REQUIRE(dev["apis"]["cuMemAlloc"]["calls"] == pairs);
  REQUIRE(dev["apis"]["cuMemFree"]["calls"] == pairs);
  REQUIRE(dev["final_live_bytes"] == 0);
  REQUIRE(j["run"]["dropped_events"] == 0);
}

TEST_CASE("LD_PRELOAD only: the processes of one tree are one run, two trees are two runs") {
  std::string d = temp_dir(), one = temp_dir() + "/one", two = temp_dir() + "/two",
              merged = temp_dir() + "/merged";
  const std::string preload = "cd " + d + " && " + kEnv + "VRAMTRACE_OUTPUT=" + d +
                              "/vramtrace.%p.vtrace LD_PRELOAD=" + kLib;
  // Forked workers and ranks exec'd by a shell both inherit the run of the tree's first process.
  Result w = sh(preload + " " + prog("workers"));
  INFO(w.out);
  REQUIRE(w.code() == 0);
  REQUIRE(traces_in(d).size() == 3);
  Result r = sh(kVramtrace + " report " + d + " -o " + one);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(one + "/report.json");
  REQUIRE(j["processes"].size() == 3);
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 48 * MiB);
  REQUIRE_FALSE(j.contains("ranks"));  // the run id is not a rank's variable
  for (const auto& p : j["processes"]) REQUIRE(p["ranks"].empty());

  // A second tree into the same folder: two ranks started by a shell script.
  Result l = sh(preload + " " + launcher() + " 2 " + prog("rank_alloc"));
  INFO(l.out);
  REQUIRE(l.code() == 0);
  REQUIRE(traces_in(d).size() == 5);
  Result refused = sh(kVramtrace + " report " + d + " -o " + two);
  INFO(refused.out);
  REQUIRE(refused.code() == 2);
  REQUIRE(contains(refused.out, "vramtrace report: these traces come from 2 different runs: "));
  REQUIRE(contains(refused.out, " and 2 more;"));  // the workers' three traces
  REQUIRE(contains(refused.out, " and 1 more;"));  // the two ranks' traces
  REQUIRE(contains(refused.out, "use --merge to report them together"));
  REQUIRE_FALSE(std::filesystem::exists(two + "/report.json"));
  // `check` and `diff` read a folder of traces as one run: refused too, the CI file failing.
  const std::string junit = one + "/junit.xml";
  Result c = sh(kVramtrace + " check " + d + " --baseline " + one + " --junit " + junit);
  INFO(c.out);
  REQUIRE(c.code() == 2);
  REQUIRE(contains(c.out, "vramtrace check: these traces come from 2 different runs: "));
  REQUIRE(contains(c.out,
                   "report them with `vramtrace report --merge`, and give the report "
                   "instead\n"));
  REQUIRE(contains(slurp(junit), "failures=\"1\""));
  REQUIRE(contains(slurp(junit), d + ": traces of different runs"));
  Result df = sh(kVramtrace + " diff " + one + " " + d);
  INFO(df.out);
  REQUIRE(df.code() == 2);
  REQUIRE(contains(df.out, "vramtrace diff: these traces come from 2 different runs: "));

  Result m = sh(kVramtrace + " report --merge " + d + " -o " + merged);
  INFO(m.out);
  REQUIRE(m.code() == 0);
  json jm = load_json(merged + "/report.json");
  REQUIRE(jm["processes"].size() == 5);
  REQUIRE(jm["ranks"].size() == 2);  // the two ranks, and only them
  REQUIRE(jm["worst_rank"]["peak_bytes"] == 32 * MiB);
}

TEST_CASE("LD_PRELOAD only: processes given one VRAMTRACE_OUTPUT name each keep their own trace") {
  std::string d = temp_dir(), out = temp_dir() + "/out";
  // No %p: the three workers are given the same file name.
  Result w = sh("cd " + d + " && " + kEnv + "VRAMTRACE_OUTPUT=" + d +
                "/t.vtrace LD_PRELOAD=" + kLib + " " + prog("workers"));
  INFO(w.out);
  REQUIRE(w.code() == 0);
  REQUIRE(contains(w.out, "workers done, 0 failed"));
  std::vector<std::string> traces = traces_in(d);
  REQUIRE(traces.size() == 3);
  // The first keeps the name; the others write NAME.<pid>.vtrace beside it and say so, once each.
  REQUIRE(std::count(traces.begin(), traces.end(), d + "/t.vtrace") == 1);
  const std::regex beside(std::regex_replace(d, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                          R"(/t\.[0-9]+\.vtrace)");
  size_t named_beside = 0;
  for (const auto& t : traces) named_beside += std::regex_match(t, beside);
  REQUIRE(named_beside == 2);
  size_t notices = 0;
  for (size_t at = w.out.find("t.vtrace exists; this process's trace is "); at != std::string::npos;
       at = w.out.find("t.vtrace exists; this process's trace is ", at + 1))
    ++notices;
  REQUIRE(notices == 2);

  Result r = sh(kVramtrace + " report " + d + " -o " + out);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE_FALSE(contains(r.out, "cut off"));
  REQUIRE_FALSE(contains(r.out, "cut short"));
  json j = load_json(out + "/report.json");
  REQUIRE(j["processes"].size() == 3);
  REQUIRE(j["run"]["problems"].empty());
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 48 * MiB);
  std::vector<uint64_t> peaks;
  for (const auto& p : j["processes"]) {
    peaks.push_back(p["devices"][0]["peak"]["bytes"]);
    REQUIRE(p["clean_exit"] == true);
  }
  std::sort(peaks.begin(), peaks.end());
  REQUIRE(peaks == std::vector<uint64_t>{8 * MiB, 16 * MiB, 24 * MiB});

  // A second run with the same name keeps the first run's traces too.
  const auto before = std::filesystem::last_write_time(d + "/t.vtrace");
  const uintmax_t size_before = std::filesystem::file_size(d + "/t.vtrace");
  REQUIRE(sh("cd " + d + " && " + kEnv + "VRAMTRACE_OUTPUT=" + d + "/t.vtrace LD_PRELOAD=" + kLib +
             " " + prog("workers"))
              .code() == 0);
  REQUIRE(traces_in(d).size() == 6);
  REQUIRE(std::filesystem::file_size(d + "/t.vtrace") == size_before);
  REQUIRE(std::filesystem::last_write_time(d + "/t.vtrace") == before);
}

TEST_CASE("launcher: a process that execs another CUDA program keeps both traces under one pid") {
  std::string d = temp_dir() + "/run";
  // Python allocates 4 MiB through the runtime, then replaces itself with `basic` (peak 13 MiB):
  // two streams from one pid, each in its own file.
  Result r = sh(kEnv + kVramtrace + " run -o " + d + " -- python3 -c \"" +
                "import ctypes, os, sys\n"
                "c = ctypes.CDLL(sys.argv[1])\n"
                "c.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]\n"
                "p = ctypes.c_void_p()\n"
                "assert c.cudaMalloc(ctypes.byref(p), 4 << 20) == 0\n"
                "os.execv(sys.argv[2], [sys.argv[2]])\" " +
                kBuild + "/standin/libcudart.so.13 " + prog("basic"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "basic done"));
  std::vector<std::string> traces = traces_in(d);
  REQUIRE(traces.size() == 2);
  json j = load_json(d + "/report.json");
  REQUIRE(j["processes"].size() == 2);
  REQUIRE(j["processes"][0]["pid"] == j["processes"][1]["pid"]);
  REQUIRE(traces[0] ==
          d + "/vramtrace." + std::to_string(j["processes"][0]["pid"].get<int>()) + "-2.vtrace");
  std::map<std::string, uint64_t> peak_of;  // executable name -> its peak
  for (const auto& p : j["processes"]) {
    std::string exe = p["exe"];
    exe = exe.substr(exe.rfind('/') + 1);
    peak_of[exe.rfind("python", 0) == 0 ? "python" : exe] = p["devices"][0]["peak"]["bytes"];
  }
  REQUIRE(peak_of == std::map<std::string, uint64_t>{{"basic", 13 * MiB}, {"python", 4 * MiB}});
  // Python's 4 MiB, never freed, and basic's 13 MiB at its peak.
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 17 * MiB);
}

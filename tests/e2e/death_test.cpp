// End-to-end tests of "nothing lost at death": a program that goes out of memory and dies at
// once (abort, segfault, uncaught exception, _exit, SIGKILL, SIGPIPE) still has its OOM and the
// allocations before it in the report, under the launcher (the collector reads the buffers the
// process shared with it) and in LD_PRELOAD file mode (a failed allocation is written out at
// once); and in file mode, a fatal signal writes out what is buffered, within the stated bound.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e/e2e_util.h"
#include "e2e/expected.h"

using nlohmann::json;

namespace {

const std::string kSmallDevice = "VRAMTRACE_STANDIN_DEVICE_BYTES=67108864 ";

struct Death {
  const char* how;
  int signal;     // 0: exits
  int exit_code;  // when it exits
};

const Death kDeaths[] = {{"abort", SIGABRT, 0}, {"segv", SIGSEGV, 0}, {"throw", SIGABRT, 0},
                         {"exit", 0, 3},        {"kill", SIGKILL, 0}, {"pipe", SIGPIPE, 0}};

void require_death(const Result& r, const Death& d) {
  if (d.signal)
    REQUIRE(r.died_of(d.signal));
  else
    REQUIRE(r.code() == d.exit_code);
}

// What oom_death did before it died, exactly.
void require_oom_report(const json& j) {
  REQUIRE(j["processes"].size() == 1);
  const json& p = j["processes"][0];
  REQUIRE(p["pid"].get<uint64_t>() > 0);
  REQUIRE(p["cut_short"] == true);
  REQUIRE(j["run"]["complete"] == false);
  REQUIRE(j["run"]["dropped_events"] == 0);
  REQUIRE(j["oom"].size() == 1);
  REQUIRE(j["devices"].size() == 1);
  expected::require_expected(j, "oom_death");
}

}  // namespace

TEST_CASE("an OOM followed at once by a death is in the report: launcher") {
  for (const Death& d : kDeaths) {
    DYNAMIC_SECTION("oom, then " << d.how) {
      std::string dir = temp_dir();
      Result r = sh(kEnv + kSmallDevice + kVramtrace + " run -o " + dir + " -- " +
                    prog("oom_death") + " " + d.how);
      INFO(r.out);
      require_death(r, d);
      json j = load_json(dir + "/report.json");
      require_oom_report(j);
      if (d.signal)
        REQUIRE(j["run"]["signal"] == d.signal);
      else
        REQUIRE(j["run"]["exit_code"] == d.exit_code);
      REQUIRE(!contains(r.out, "no CUDA device memory was used"));
    }
  }
}

TEST_CASE("an OOM followed at once by a death is in the report: LD_PRELOAD file mode") {
  for (const Death& d : kDeaths) {
    DYNAMIC_SECTION("oom, then " << d.how) {
      std::string dir = temp_dir();
      // A flush period far longer than the test: only the flush at the failure writes it.
      Result r = sh(kEnv + kSmallDevice + "VRAMTRACE_FLUSH_MS=60000 VRAMTRACE_OUTPUT=" + dir +
                    "/t.vtrace LD_PRELOAD=" + kLib + " " + prog("oom_death") + " " + d.how);
      INFO(r.out);
      require_death(r, d);
      Result rep = sh(kEnv + kVramtrace + " report " + dir + "/t.vtrace -o " + dir + "/rep");
      INFO(rep.out);
      REQUIRE(rep.code() == 0);
      require_oom_report(load_json(dir + "/rep/report.json"));
    }
  }
}

TEST_CASE(
    "file mode: a fatal signal writes out what is buffered, SIGKILL and _exit lose at "
    "most the last flush period") {
  std::string dir = temp_dir();
  const std::string preload = kEnv + "VRAMTRACE_OUTPUT=" + dir + "/%p.vtrace LD_PRELOAD=" + kLib;
  auto report_of = [&](const std::string& name) {
    std::string out = dir + "/" + name;
    Result rep = sh(kEnv + kVramtrace + " report " + dir + " -o " + out);
    INFO(rep.out);
    REQUIRE(rep.code() == 0);
    for (const auto& t : traces_in(dir)) std::filesystem::remove(t);
    return load_json(out + "/report.json");
  };
  auto require_crash_events = [](const json& j) {
    REQUIRE(j["devices"][0]["peak"]["bytes"] == 5 * MiB);
    REQUIRE(j["processes"][0]["cut_short"] == true);
    REQUIRE(j["processes"][0]["devices"][0]["launches"]["count"] == 1);
  };
  // A flush period longer than the program: only the crash path writes the events.
  for (const char* how : {"abort", "segv", "pipe"}) {
    DYNAMIC_SECTION("a fatal signal, flush period 60 s: " << how) {
      Result r = sh(preload + " VRAMTRACE_FLUSH_MS=60000 " + prog("crash") + " " + how);
      INFO(r.out);
      REQUIRE(r.died_of(std::string(how) == "segv"   ? SIGSEGV
                        : std::string(how) == "pipe" ? SIGPIPE
                                                     : SIGABRT));
      require_crash_events(report_of(std::string("rep-") + how));
    }
  }
  SECTION(
      "the program's own handler, installed before CUDA started, still runs, and sees the "
      "signal") {
    Result r = sh(preload + " VRAMTRACE_FLUSH_MS=60000 " + prog("crash") + " handled");
    INFO(r.out);
    REQUIRE(r.code() == 9);
    REQUIRE(r.out == "crashing: handled\nprogram handler: 6\n");
    json j = report_of("rep-handled");
    REQUIRE(j["devices"][0]["peak"]["bytes"] == 5 * MiB);
    REQUIRE(j["processes"][0]["devices"][0]["launches"]["count"] == 1);
  }
  // What cannot be caught: events older than the flush period (50 ms; the program waits 300 ms
  // before it dies) were written by the writer thread.
  SECTION("SIGKILL, flush period 50 ms") {
    Result r = sh(preload + " VRAMTRACE_FLUSH_MS=50 " + prog("crash") + " kill");
    INFO(r.out);
    REQUIRE(r.died_of(SIGKILL));
    require_crash_events(report_of("rep-kill"));
  }
  SECTION("_exit, flush period 50 ms") {
    Result r = sh(preload + " VRAMTRACE_FLUSH_MS=50 " + prog("crash") + " exit7");
    INFO(r.out);
    REQUIRE(r.code() == 7);
    require_crash_events(report_of("rep-exit"));
  }
}

TEST_CASE(
    "launcher: SIGKILL and _exit lose nothing, even with a flush period longer than the run") {
  for (const char* how : {"kill", "exit7", "abort"}) {
    DYNAMIC_SECTION("crash " << how) {
      std::string dir = temp_dir();
      Result r = sh(kEnv + "VRAMTRACE_FLUSH_MS=60000 " + kVramtrace + " run -o " + dir + " -- " +
                    prog("crash") + " " + how);
      INFO(r.out);
      json j = load_json(dir + "/report.json");
      REQUIRE(j["devices"][0]["peak"]["bytes"] == 5 * MiB);
      REQUIRE(j["processes"].size() == 1);
      REQUIRE(j["processes"][0]["cut_short"] == true);
      REQUIRE(j["processes"][0]["devices"][0]["launches"]["count"] == 1);
    }
  }
}

// End-to-end tests of the CI gate: `vramtrace check`, `vramtrace diff` and `run --baseline`,
// on stand-in runs of tests/programs/grow that differ by one known allocation (8 MiB).
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "e2e/e2e_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Runs {
  std::string dir, base, cand;
};

const Runs& runs() {
  static Runs r = [] {
    Runs x;
    x.dir = temp_dir();
    x.base = x.dir + "/base";
    x.cand = x.dir + "/cand";
    // Every allocation with its stack, so that "what grew" names the function.
    const std::string env = kEnv + "VRAMTRACE_STACKS=all ";
    REQUIRE(sh(env + kVramtrace + " run -o " + x.base + " -- " + prog("grow")).code() == 0);
    // The same command (the gate compares only runs of one command), 8 MiB more.
    REQUIRE(sh(env + "GROW_EXTRA_MIB=8 " + kVramtrace + " run -o " + x.cand + " -- " + prog("grow"))
                .code() == 0);
    return x;
  }();
  return r;
}

std::string check(const std::string& args) { return kVramtrace + " check " + args; }

void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(); }

}  // namespace

TEST_CASE("check fails a regression, naming what grew, and passes within budget") {
  const Runs& r = runs();
  Result bad = sh(check(r.cand + " --baseline " + r.base + "/report.json"));
  INFO(bad.out);
  REQUIRE(bad.code() == 1);
  REQUIRE(contains(bad.out,
                   "baseline 64.00 MiB, candidate 72.00 MiB, +8.00 MiB (+12.5%), "
                   "budget +5% (up to 67.20 MiB): REGRESSION"));
  // The site is grow_activations, with its file and line when the program has debug information.
  REQUIRE(contains(bad.out, "grew: grow_activations"));
  REQUIRE(contains(bad.out, "+8.00 MiB at the peak (0 -> 1 allocations)"));
  REQUIRE(contains(bad.out, "library grew: grow +8.00 MiB at the peak"));
  REQUIRE(contains(bad.out, "FAILED: 1 of 1 over budget"));

  Result ok = sh(check(r.cand + " --baseline " + r.base + " --max-increase 8MiB"));
  INFO(ok.out);
  REQUIRE(ok.code() == 0);
  REQUIRE(contains(ok.out, "budget +8.00 MiB (up to 72.00 MiB): ok"));
  REQUIRE(sh(check(r.cand + " --baseline " + r.base + " --max-increase 12.5%")).code() == 0);
  REQUIRE(sh(check(r.cand + " --baseline " + r.base + " --max-increase 12.4%")).code() == 1);
  // An absolute cap on top of the relative budget, and a per-device budget.
  REQUIRE(
      sh(check(r.cand + " --baseline " + r.base + " --max-increase 20% --max-peak 70MiB")).code() ==
      1);
  REQUIRE(sh(check(r.cand + " --baseline " + r.base + " --max-increase 0:20%")).code() == 0);
  // A trace file as the candidate works like its report.
  std::vector<std::string> traces = traces_in(r.cand);
  REQUIRE(traces.size() == 1);
  REQUIRE(sh(check(traces[0] + " --baseline " + r.base)).code() == 1);
}

TEST_CASE("check writes a Markdown summary and a JUnit result") {
  const Runs& r = runs();
  std::string md = r.dir + "/summary.md", xml = r.dir + "/junit.xml";
  REQUIRE(sh(check(r.cand + " --baseline " + r.base + " --markdown " + md + " --junit " + xml))
              .code() == 1);
  std::string m = slurp(md), x = slurp(xml);
  REQUIRE(contains(m, "### vramtrace: peak device memory regressed"));
  REQUIRE(contains(m, "| 64.00 MiB | 72.00 MiB |"));
  REQUIRE(contains(m, "**regression**"));
  REQUIRE(contains(x, "<testsuite name=\"vramtrace peak memory\" tests=\"1\" failures=\"1\">"));
  REQUIRE(contains(x,
                   "<failure message=\"peak 72.00 MiB over budget +5% (up to 67.20 MiB) "
                   "(baseline 64.00 MiB)\">"));
}

TEST_CASE("check answers bad input with exit 2 and says which") {
  const Runs& r = runs();
  Result missing = sh(check(r.cand + " --baseline " + r.dir + "/none.json"));
  REQUIRE(missing.code() == 2);
  REQUIRE(contains(missing.out, "baseline " + r.dir + "/none.json: no such file or directory"));

  std::ofstream(r.dir + "/corrupt.json") << "{\"schema\": \"vramtrace.rep";
  Result corrupt = sh(check(r.cand + " --baseline " + r.dir + "/corrupt.json"));
  REQUIRE(corrupt.code() == 2);
  REQUIRE(contains(corrupt.out, "not a vramtrace report"));

  json j = json::parse(slurp(r.base + "/report.json"));
  j["schema"] = "vramtrace.report/9";
  write_json(r.dir + "/future.json", j);
  Result schema = sh(check(r.cand + " --baseline " + r.dir + "/future.json"));
  REQUIRE(schema.code() == 2);
  REQUIRE(contains(schema.out,
                   "report schema \"vramtrace.report/9\", this vramtrace reads "
                   "\"vramtrace.report/1\""));

  REQUIRE(sh(check(r.cand + " --baseline " + r.base + " --max-increase 5 percent")).code() == 2);
  REQUIRE(sh(check(r.cand)).code() == 2);  // --baseline is required
}

TEST_CASE("a device present on one side only") {
  const Runs& r = runs();
  json base = json::parse(slurp(r.base + "/report.json"));
  json two = base;
  json extra = two["devices"][0];
  extra["index"] = 1;
  two["devices"].push_back(extra);
  write_json(r.dir + "/two.json", two);
  // New in the candidate: no baseline to hold it to, so it fails unless a cap allows it.
  Result added = sh(check(r.dir + "/two.json --baseline " + r.base));
  INFO(added.out);
  REQUIRE(added.code() == 1);
  REQUIRE(contains(added.out,
                   "device 1 (vramtrace stand-in (CPU)): baseline -, candidate "
                   "64.00 MiB, budget none: REGRESSION"));
  REQUIRE(contains(added.out, "new in the candidate: no baseline for it"));
  REQUIRE(sh(check(r.dir + "/two.json --baseline " + r.base + " --max-peak 1:64MiB")).code() == 0);
  REQUIRE(sh(check(r.dir + "/two.json --baseline " + r.base + " --device 0")).code() == 0);
  // A device neither run has: an error, not a pass that checked nothing.
  Result typo = sh(check(r.dir + "/two.json --baseline " + r.base + " --device 7"));
  REQUIRE(typo.code() == 2);
  REQUIRE(contains(typo.out,
                   "vramtrace check: --device names device 7, which neither report "
                   "has (devices: 0, 1)"));
  // Gone from the candidate: no measurement of a device the baseline has, so the candidate
  // cannot pass (exit 4), unless the check is limited to the devices it has.
  Result gone = sh(check(r.base + " --baseline " + r.dir + "/two.json"));
  INFO(gone.out);
  REQUIRE(gone.code() == 4);
  REQUIRE(contains(gone.out, "(not used by the candidate)"));
  REQUIRE(contains(gone.out,
                   "vramtrace check: candidate INCOMPLETE: no measurement for device 1 "
                   "(vramtrace stand-in (CPU)), which the baseline has\n"));
  REQUIRE(sh(check(r.base + " --baseline " + r.dir + "/two.json --device 0")).code() == 0);
}

TEST_CASE("diff shows the known allocation that differs") {
  const Runs& r = runs();
  Result d = sh(kVramtrace + " diff " + r.base + " " + r.cand + " --html " + r.dir + "/diff.html");
  INFO(d.out);
  REQUIRE(d.code() == 0);
  REQUIRE(contains(d.out, "peak 64.00 MiB -> 72.00 MiB (+8.00 MiB, +12.5%)"));
  REQUIRE(contains(d.out, "  grow_activations"));
  REQUIRE(contains(d.out, ": 0 B in 0 -> 8.00 MiB in 1 allocations (+8.00 MiB)"));
  REQUIRE(contains(slurp(r.dir + "/diff.html"), "<td>grow_activations"));
}

TEST_CASE("run --baseline checks in one step and passes the command's failure through") {
  const Runs& r = runs();
  Result reg = sh(kEnv + "GROW_EXTRA_MIB=1 " + kVramtrace + " run --baseline " + r.base +
                  " --max-increase 1% -o " + r.dir + "/one -- " + prog("grow"));
  INFO(reg.out);
  REQUIRE(reg.code() == 1);
  REQUIRE(contains(reg.out, "+1.00 MiB (+1.6%), budget +1% (up to 64.64 MiB): REGRESSION"));
  Result ok = sh(kEnv + "GROW_EXTRA_MIB=1 " + kVramtrace + " run --baseline " + r.base +
                 " --max-increase 2% -o " + r.dir + "/two -- " + prog("grow"));
  REQUIRE(ok.code() == 0);
  Result fails = sh(kEnv + kVramtrace + " run --baseline " + r.base + " -o " + r.dir +
                    "/three -- sh -c 'exit 3'");
  REQUIRE(fails.code() == 3);
  Result nobase = sh(kEnv + kVramtrace + " run --baseline " + r.dir + "/none.json -o " + r.dir +
                     "/four -- " + prog("grow"));
  REQUIRE(nobase.code() == 2);
  REQUIRE_FALSE(fs::exists(r.dir + "/four/report.json"));  // refused before running anything
}

TEST_CASE("the ready CI job records a baseline, then fails a regression") {
  std::string d = temp_dir();
  std::string job = "cd " + d + " && " + kEnv + "VRAMTRACE=" + kVramtrace + " " + VT_SOURCE_DIR +
                    "/scripts/ci/memory-gate.sh ci/base.json -- " + prog("grow");
  Result first = sh(job);
  INFO(first.out);
  REQUIRE(first.code() == 0);
  REQUIRE(contains(first.out, "baseline written to ci/base.json"));
  REQUIRE(json::parse(slurp(d + "/ci/base.json"))["devices"][0]["peak"]["bytes"] == 64 * MiB);
  Result same = sh(job);
  REQUIRE(same.code() == 0);
  // Budgets per category reach the gate; a native program has no PyTorch categories to check,
  // and a budget that checks nothing fails the job as bad input, never passes it.
  Result cats = sh("export CATEGORY_BUDGETS='parameters:0 activations:5%' && " + job);
  INFO(cats.out);
  REQUIRE(cats.code() == 2);
  REQUIRE(contains(cats.out,
                   "the budgets per category cannot be checked: neither run has PyTorch's "
                   "categories"));
  // The same command, 8 MiB more.
  Result grown = sh("export GROW_EXTRA_MIB=8 && " + job);
  INFO(grown.out);
  REQUIRE(grown.code() == 1);
  REQUIRE(contains(slurp(d + "/vramtrace-ci/summary.md"), "**regression**"));
  REQUIRE(contains(slurp(d + "/vramtrace-ci/junit.xml"), "failures=\"1\""));
}

// The gate fails closed: a candidate that is not a whole measurement of the baseline's command
// exits 4, and the CI files say why.
TEST_CASE("check fails an incomplete measurement with exit 4 and says why") {
  const Runs& r = runs();
  const std::string md = r.dir + "/incomplete.md", xml = r.dir + "/incomplete.xml";
  auto gate = [&](const std::string& candidate, const std::string& extra = "") {
    fs::remove(md);
    fs::remove(xml);
    Result g = sh(check(candidate + " --baseline " + r.base + " --markdown " + md + " --junit " +
                        xml + extra));
    return g;
  };
  const std::string kIncomplete =
      "FAILED: incomplete measurement: the candidate's peaks are not "
      "a whole measurement of the baseline's command\n";
  const std::string kStandIn =
      "no measurement for device 0 (vramtrace stand-in (CPU)), which the "
      "baseline has";

  SECTION("a command that does not exist: no process at all") {
    // Run by a shell (vramtrace itself leaves nothing of a command it cannot start).
    const std::string d = r.dir + "/missing-cmd";
    Result run = sh(kEnv + kVramtrace + " run -o " + d + " -- sh -c " + r.dir + "/no-such-command");
    REQUIRE(run.code() == 127);
    Result g = gate(d);
    INFO(g.out);
    REQUIRE(g.code() == 4);
    REQUIRE(contains(g.out,
                     "candidate INCOMPLETE: the candidate has no profiled process: no "
                     "process of its command reached vramtrace (the command exited 127: "
                     "not found)\n"));
    REQUIRE(contains(g.out, "candidate INCOMPLETE: " + kStandIn + "\n"));
    REQUIRE(contains(g.out, "NOTE: the candidate ran another command than the baseline: 'sh -c " +
                                r.dir + "/no-such-command', the baseline '" + prog("grow") +
                                "'\n"));
    REQUIRE(contains(g.out, kIncomplete));
    REQUIRE_FALSE(contains(g.out, "PASSED"));
    std::string m = slurp(md), x = slurp(xml);
    REQUIRE(contains(m, "### vramtrace: peak device memory unknown: incomplete measurement\n"));
    REQUIRE(contains(m, "**Incomplete measurement**: the candidate has no profiled process"));
    REQUIRE(contains(x, "<testsuite name=\"vramtrace peak memory\" tests=\"2\" failures=\"1\">"));
    REQUIRE(contains(x,
                     "<testcase classname=\"vramtrace.complete\" name=\"complete measurement\">"
                     "<failure message=\"incomplete measurement: the candidate has no profiled "
                     "process: no process of its command reached vramtrace (the command exited "
                     "127: not found) (and 1 more)\">"));
  }

  SECTION("cut short by SIGABRT after the same work") {
    const std::string d = r.dir + "/aborted";
    Result run =
        sh(kEnv + "GROW_THEN=abort " + kVramtrace + " run -o " + d + " -- " + prog("grow"));
    REQUIRE(run.died_of(SIGABRT));
    Result g = gate(d);
    INFO(g.out);
    REQUIRE(g.code() == 4);
    // Its peak is the baseline's: measured, but not a whole run.
    REQUIRE(contains(g.out,
                     "baseline 64.00 MiB, candidate 64.00 MiB, +0 B (+0.0%), budget +5% "
                     "(up to 67.20 MiB): ok"));
    REQUIRE(contains(g.out,
                     "candidate INCOMPLETE: cut short: the command was killed by signal 6 "
                     "(SIGABRT)\n"));
    REQUIRE(std::regex_search(g.out, std::regex("candidate INCOMPLETE: cut short: pid [1-9][0-9]* "
                                                "\\(grow\\) did not exit cleanly\n")));
    REQUIRE(contains(g.out, kIncomplete));
    REQUIRE(contains(slurp(md),
                     "**Incomplete measurement**: cut short: the command was killed by "
                     "signal 6 (SIGABRT)\n"));
    std::string x = slurp(xml);
    REQUIRE(contains(x, "tests=\"2\" failures=\"1\""));
    REQUIRE(contains(x,
                     "<failure message=\"incomplete measurement: cut short: the command was "
                     "killed by signal 6 (SIGABRT) (and 1 more)\">"));
  }

  SECTION("a different command is a note, not an incomplete measurement") {
    const std::string d = r.dir + "/other-cmd";
    REQUIRE(sh(kEnv + kVramtrace + " run -o " + d + " -- " + prog("grow") + " 0").code() == 0);
    Result g = gate(d);
    INFO(g.out);
    REQUIRE(g.code() == 0);
    REQUIRE(contains(g.out,
                     "vramtrace check: NOTE: the candidate ran another command than the "
                     "baseline: '" +
                         prog("grow") + " 0', the baseline '" + prog("grow") + "'\n"));
    REQUIRE_FALSE(contains(g.out, "INCOMPLETE"));
    REQUIRE(contains(g.out, "vramtrace check: PASSED: 1 within budget\n"));
    REQUIRE(contains(slurp(md), "**Note**: the candidate ran another command than the baseline"));
    REQUIRE(contains(slurp(xml), "tests=\"1\" failures=\"0\""));
  }

  SECTION("a damaged trace") {
    std::vector<std::string> traces = traces_in(r.base);
    REQUIRE(traces.size() == 1);
    std::string bytes = slurp(traces[0]);
    const std::string cut = r.dir + "/cut.vtrace";
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
    Result g = gate(cut);
    INFO(g.out);
    // The trace's one frame is cut: nothing of the run is left, and the gate refuses it as
    // `vramtrace report` does (bad input), rather than comparing a run that used no memory.
    REQUIRE(g.code() == 2);
    REQUIRE(contains(g.out, "vramtrace check: candidate " + cut +
                                ": nothing could be read from its traces (" + cut +
                                ": trace ends inside a frame at byte 16 ("));
    REQUIRE(contains(g.out, "bytes; the process was cut off while writing))\n"));
    REQUIRE(contains(slurp(md), "nothing could be read from its traces"));
  }

  SECTION("bad input (exit 2) still writes the CI files, failing") {
    fs::remove(md);
    fs::remove(xml);
    Result g = sh(
        check(r.cand + " --baseline " + r.dir + "/none.json --markdown " + md + " --junit " + xml));
    REQUIRE(g.code() == 2);
    const std::string why = "baseline " + r.dir + "/none.json: no such file or directory";
    std::string m = slurp(md);
    REQUIRE(contains(m, "### vramtrace: peak device memory not checked\n\n**Failed**: baseline "));
    REQUIRE(contains(m, "none.json: no such file or directory\n"));
    REQUIRE(contains(slurp(xml),
                     "<testsuite name=\"vramtrace peak memory\" tests=\"1\" "
                     "failures=\"1\">\n  <testcase classname=\"vramtrace.check\" "
                     "name=\"peak memory checked\"><failure message=\"" +
                         why + "\">"));
  }

  SECTION("a command line refused before anything is read still writes the CI files, failing") {
    fs::remove(md);
    fs::remove(xml);
    Result g = sh(check(r.cand + " --baseline " + r.base + " --markdown=" + md + " --junit " + xml +
                        " --device 4096"));
    INFO(g.out);
    REQUIRE(g.code() == 2);
    REQUIRE(contains(g.out, "--device: Value 4096 not in range 0 to 4095\n"));
    REQUIRE(contains(slurp(md), "**Failed**: --device: Value 4096 not in range 0 to 4095\n"));
    REQUIRE(
        contains(slurp(xml), "<failure message=\"--device: Value 4096 not in range 0 to 4095\">"));
    // `run` with a CI file but no baseline: no gate at all, which the CI file says.
    fs::remove(xml);
    Result n = sh(kEnv + kVramtrace + " run --junit " + xml + " -- true");
    REQUIRE(n.code() == 2);
    REQUIRE(contains(slurp(xml), "<failure message=\"--junit requires --baseline\">"));
  }

  SECTION("run --baseline: a command that fails writes the CI files, failing") {
    fs::remove(md);
    fs::remove(xml);
    Result g = sh(kEnv + kVramtrace + " run --baseline " + r.base + " --markdown " + md +
                  " --junit " + xml + " -o " + r.dir + "/fails -- sh -c 'exit 3'");
    REQUIRE(g.code() == 3);
    REQUIRE(contains(slurp(md), "**Failed**: the command exited 3: not checked"));
    REQUIRE(contains(slurp(xml), "<failure message=\"the command exited 3: not checked\">"));
  }
}

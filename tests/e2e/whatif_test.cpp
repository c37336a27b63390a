// End-to-end tests of `vramtrace whatif` on the stand-in PyTorch (tests/programs/fake_torch):
// py_torch_train.py recorded under `vramtrace run` (it dies of an OOM on the 80 MiB device, at
// fc2's 20 MiB output in iteration 3), then replayed through the model of PyTorch's caching
// allocator under the run's settings, smaller limits, a batch scale and expandable segments,
// with the figures derived by hand below from CUDACachingAllocator's rules; and the refusals
// (a native program, an unknown alloc-conf key, a bad size), which write nothing into RUN.
//
// The program's requests (all on stream 0): iteration 0 makes the two 1 MiB weights (small
// pool: one 2 MiB segment), the 4 MiB batch (large pool: a 20 MiB segment, split), fc1's 2 MiB
// scratch and 4 MiB output, fc2's the same (all carved from that segment), two 1 MiB grads and
// two 1 MiB momentum buffers (two more 2 MiB small segments): 26 MiB reserved. Iterations 1 and
// 2 reuse the 20 MiB segment. Iteration 3 (B = 10240): the 20 MiB batch takes the whole free
// 20 MiB segment (nothing left to split off), fc1's 10 MiB scratch gets a 10 MiB segment
// (>= 10 MiB: its own, 2 MiB rounding; 36 MiB), is freed, fc1's 20 MiB output a 20 MiB segment
// (56 MiB), fc2's scratch reuses the 10 MiB one, and fc2's 20 MiB output is the request the run
// failed on. The model: 56 + 20 = 76 MiB within the 80 MiB measured at the OOM (10 MiB free on
// the device + 70 MiB the fake allocator held): it fits, reserved peak 76 MiB.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "e2e/e2e_util.h"
#include "unit/trace_builder.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kTrainScript = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_train.py";

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.insert(e.path().string() + ":" +
               (e.is_regular_file()
                    ? std::to_string(e.file_size()) + ":" +
                          std::to_string(e.last_write_time().time_since_epoch().count())
                    : std::string("dir")));
  return out;
}

json whatif_json(const std::string& dir, const std::string& opts) {
  Result r = sh(kEnv + kVramtrace + " whatif " + dir + " --json " + opts + " 2>/dev/null");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  const std::string path = temp_dir() + "/whatif.json";
  {
    std::ofstream f(path);
    f << r.out;
  }
  return load_json(path);  // validated against report/whatif.schema.json (its "schema" key)
}

// A run that died in its first step, as the .torch file alone gives it (see the test below),
// with a second step at the run's batch after the hook's two when `twice_at_8`, and `more`
// lines after them.
void write_predicted_run(const std::string& dir, const std::string& more, bool twice_at_8 = false) {
  fs::create_directories(dir);
  auto mib = [](uint64_t n) { return std::to_string(n * MiB); };
  auto step = [&](int id, uint64_t batch) {
    const std::string s = std::to_string(id);
    auto per = [&](uint64_t at8) { return std::to_string(at8 * MiB / 8 * batch); };
    return "N\t0\t" + s + "\t" + std::to_string(batch) + "\t8\t1000200000000\tok\n" + "R\t" + s +
           "\ta\t1\t" + per(30) + "\t1\tf\n" + "R\t" + s + "\ta\t2\t" + per(30) + "\t2\tf\n" +
           "R\t" + s + "\ta\t3\t" + per(50) + "\t2\tf\n" + "R\t" + s + "\tf\t3\t" + per(50) +
           "\t0\tl\n" + "R\t" + s + "\ta\t4\t" + per(20) + "\t0\tl\n" + "R\t" + s + "\tf\t4\t" +
           per(20) + "\t0\tl\n" + "R\t" + s + "\tf\t2\t" + per(30) + "\t0\tb\n" + "R\t" + s +
           "\ta\t5\t" + mib(40) + "\t1\tb\n" + "R\t" + s + "\tf\t1\t" + per(30) + "\t0\tb\n" +
           "R\t" + s + "\ta\t6\t" + mib(40) + "\t1\ts\n";
  };
  {
    // The process's own trace: its CUDA context on a 2 GiB device, nothing outside PyTorch.
    const auto trace = vt_test::TraceBuilder(4242).context(0, 2048 * MiB).exit_clean().bytes();
    std::ofstream(dir + "/vramtrace.4242.vtrace", std::ios::binary)
        .write(reinterpret_cast<const char*>(trace.data()),
               static_cast<std::streamsize>(trace.size()));
    std::ofstream f(dir + "/vramtrace.4242.torch");
    f << "vramtrace.torch/2\t4242\t1000000000000\t10000000000\t2.11.0\n"
         "M\t1\tfc1\tLinear\tm.py\t1\nM\t2\tfc2\tLinear\tm.py\t2\n"
         "E\t0\tsegment_alloc\t1000000000\t"
      << mib(40)
      << "\t0\t1000100000\t\t\n"
         "E\t0\talloc\t1000000000\t"
      << mib(40)
      << "\t0\t1000100000\t\t\n"
         "L\t1000150000000\t0\t1000000000\t"
      << mib(40)
      << "\tparam\tfc1.weight\t3200x3276"
         "8\tfloat32\n"
         "E\t0\tsegment_alloc\t2000000000\t"
      << mib(30)
      << "\t0\t1000210000\t\t\n"
         "E\t0\talloc\t2000000000\t"
      << mib(30)
      << "\t0\t1000210000\t\t\n"
         "E\t0\tsegment_alloc\t3000000000\t"
      << mib(12)
      << "\t0\t1000220000\t\t\n"
         "E\t0\talloc\t3000000000\t"
      << mib(12)
      << "\t0\t1000220000\t\t\n"
         "E\t0\tfree_completed\t3000000000\t"
      << mib(12)
      << "\t0\t1000230000\t\t\n"
         "E\t0\tsegment_alloc\t4000000000\t"
      << mib(30)
      << "\t0\t1000240000\t\t\n"
         "E\t0\talloc\t4000000000\t"
      << mib(30)
      << "\t0\t1000240000\t\t\n"
         "E\t0\toom\t0\t"
      << mib(50) << "\t0\t1000250000\t\t" << mib(400) << "\n"
      << step(1, 8) << step(2, 4) << (twice_at_8 ? step(3, 8) : "") << more << "END\t10\n";
  }
}

}  // namespace

TEST_CASE("whatif: a stand-in PyTorch run replayed under other limits, batch and settings") {
  const std::string dir = temp_dir() + "/run";
  Result run = sh(kEnv + fake_torch_env() + " " + kVramtrace + " run -o " + dir + " -- python3 " +
                  kTrainScript);
  INFO(run.out);
  REQUIRE(run.code() == 1);  // the program's own uncaught OutOfMemoryError
  const auto before = listing(dir);

  SECTION("its own settings: the failed request fits the model's segments") {
    json j = whatif_json(dir, "");
    CHECK(j["schema"] == "vramtrace.whatif/1");
    CHECK(j["verdict"] == "fits");
    CHECK(j["reserved_peak_bytes"] == 76 * MiB);
    CHECK(j["recorded_reserved_peak_bytes"] == 70 * MiB);
    CHECK(j["recorded_oom"] == true);
    CHECK(j["truncated_at_recorded_oom"] == true);
    CHECK(j["oom"].is_null());
    CHECK(j["requests"] == 26);  // 11 + 5 + 5 + 4 allocations, and the failed request
    CHECK(j["settings"]["limit_bytes"] == 80 * MiB);
    CHECK(j["settings"]["alloc_conf"] == "");
    CHECK(j["torch_version"] == "0.0+standin");
    CHECK(j["replays"].size() == 1);
  }
  SECTION("under 60 MiB: the run's own request runs out, after the cache is released") {
    // 56 + 20 > 60; the free 10 MiB segment goes back (46 MiB), 46 + 20 > 60: out of memory
    // with 46 MiB reserved, all of it in use (batch 20, fc1's output 20, six 1 MiB blocks).
    json j = whatif_json(dir, "--limit 60MiB");
    CHECK(j["verdict"] == "oom");
    CHECK(j["reserved_peak_bytes"] == 56 * MiB);
    const json& o = j["oom"];
    CHECK(o["requested_bytes"] == 20 * MiB);
    CHECK(o["recorded_request"] == true);
    CHECK(o["request_index"] == 25);
    CHECK(o["iteration"] == 3);
    CHECK(o["module"] == "fc2");
    CHECK(o["phase"] == "forward");
    CHECK(o["fragmentation"]["reserved_bytes"] == 46 * MiB);
    CHECK(o["fragmentation"]["allocated_bytes"] == 46 * MiB);
    CHECK(o["fragmentation"]["cached_free_bytes"] == 0);
  }
  SECTION("under 50 MiB: an earlier request runs out, fc2's scratch") {
    // fc1's output: 36 + 20 > 50, the free 10 MiB segment released, 26 + 20 = 46; fc2's 10 MiB
    // scratch then: 46 + 10 > 50 and nothing cached: request 24 (the 25th), out of memory.
    json j = whatif_json(dir, "--limit 50MiB");
    CHECK(j["verdict"] == "oom");
    CHECK(j["reserved_peak_bytes"] == 46 * MiB);
    CHECK(j["oom"]["requested_bytes"] == 10 * MiB);
    CHECK(j["oom"]["request_index"] == 24);
    CHECK(j["oom"]["recorded_request"] == false);
    CHECK(j["oom"]["module"] == "fc2");
  }
  SECTION("half the batch") {
    // Inputs, temporaries and activations halve (19 requests: the batch, two scratches and two
    // outputs in each of iterations 0-2, four in iteration 3); weights, grads and momentum do
    // not. The 1 MiB scratches move to the small pool: a fourth 2 MiB segment (28 MiB). In
    // iteration 3 the 10 MiB batch and 10 MiB output share the 20 MiB segment, fc2's 5 MiB
    // scratch takes a new 20 MiB one (48 MiB), where the failed request, in the forward and
    // halved to 10 MiB, fits.
    json j = whatif_json(dir, "--scale-batch 0.5");
    CHECK(j["verdict"] == "fits");
    CHECK(j["scaled_requests"] == 19);
    CHECK(j["reserved_peak_bytes"] == 48 * MiB);
    CHECK(j["settings"]["scale_batch"] == 0.5);
  }
  SECTION("the largest batch under 60 MiB is below the recorded one") {
    json j = whatif_json(dir, "--limit 60MiB --max-batch");
    REQUIRE(j["max_batch"].is_object());
    const double scale = j["max_batch"]["scale"];
    CHECK(scale < 1.0);
    CHECK(scale > 0.5);  // half the batch needs 48 MiB
    // The scale found fits, and 1 % more does not.
    char more[32];
    std::snprintf(more, sizeof more, "%.4f", scale * 1.01);
    CHECK(whatif_json(dir, "--limit 60MiB --scale-batch " + std::string(more))["verdict"] == "oom");
  }
  SECTION("refusals: an unknown key lists the known ones, a bad size is one line") {
    Result bad = sh(kEnv + kVramtrace + " whatif " + dir + " --alloc-conf expandable:True");
    CHECK(bad.code() == 2);
    CHECK(bad.out.find("unknown key 'expandable'") != std::string::npos);
    CHECK(bad.out.find("expandable_segments") != std::string::npos);
    Result size = sh(kEnv + kVramtrace + " whatif " + dir + " --limit 12parsecs");
    CHECK(size.code() == 2);
    CHECK(std::count(size.out.begin(), size.out.end(), '\n') == 1);
    Result scale = sh(kEnv + kVramtrace + " whatif " + dir + " --scale-batch -1");
    CHECK(scale.code() == 2);
    // Values PyTorch refuses (std::stoull: out of range; "1e3" is 1, under 20): exit 2 too.
    Result digits = sh(kEnv + kVramtrace + " whatif " + dir +
                       " --alloc-conf max_split_size_mb:" + "12345678901234567890123");
    CHECK(digits.code() == 2);
    CHECK(digits.out ==
          "vramtrace whatif: alloc-conf: max_split_size_mb: '12345678901234567890123' is out of "
          "range (PyTorch refuses a number past 2^64 - 1)\n");
    Result exp = sh(kEnv + kVramtrace + " whatif " + dir + " --alloc-conf max_split_size_mb:1e3");
    CHECK(exp.code() == 2);
    CHECK(exp.out.find("PyTorch reads '1e3' as 1") != std::string::npos);
  }
  CHECK(listing(dir) == before);  // nothing written into RUN
}

TEST_CASE("whatif: a run without PyTorch's allocator is refused, exit 2") {
  const std::string dir = temp_dir() + "/native";
  Result run = sh(kEnv + kVramtrace + " run -o " + dir + " -- " + prog("basic"));
  REQUIRE(run.code() == 0);
  const auto before = listing(dir);
  Result r = sh(kEnv + kVramtrace + " whatif " + dir);
  CHECK(r.code() == 2);
  CHECK(r.out.find("models PyTorch's caching allocator only") != std::string::npos);
  CHECK(listing(dir) == before);
}

TEST_CASE("whatif: the run's own PYTORCH_CUDA_ALLOC_CONF is recorded and replayed under") {
  // The start-up hook writes the settings into the .torch file; --alloc-conf goes over them.
  // max_split_size_mb:64 changes nothing here (no block reaches 64 MiB): 76 MiB as without it.
  const std::string dir = temp_dir() + "/run";
  Result run = sh(kEnv + fake_torch_env() + " PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64 " +
                  kVramtrace + " run -o " + dir + " -- python3 " + kTrainScript);
  INFO(run.out);
  REQUIRE(run.code() == 1);
  json j = whatif_json(dir, "");
  CHECK(j["settings"]["recorded_alloc_conf"] == "max_split_size_mb:64");
  CHECK(j["settings"]["recorded_alloc_conf_source"] == "recorded");
  CHECK(j["settings"]["alloc_conf"] == "max_split_size_mb:64");
  CHECK(j["reserved_peak_bytes"] == 76 * MiB);
  j = whatif_json(dir, "--alloc-conf expandable_segments:True");
  CHECK(j["settings"]["alloc_conf"] == "expandable_segments:True,max_split_size_mb:64");
}

TEST_CASE("whatif: a run that died in its first step, completed from the hook's prediction") {
  // The .torch file alone (tests/unit/predict_test.cpp derives the figures): parameters of
  // 40 MiB, then the first step's fc1 output, a 12 MiB workspace, fc2's output and fc2's 50 MiB
  // request refused; the hook predicted the whole step at batches 8 (the run's) and 4. The
  // completed step peaks at 202 MiB reserved; half the batch at 190 MiB (the parameters, named
  // by the L line, do not scale).
  const std::string dir = temp_dir() + "/predicted";
  write_predicted_run(dir, "");
  json j = whatif_json(dir, "");
  CHECK(j["verdict"] == "fits");
  CHECK(j["reserved_peak_bytes"] == 202 * MiB);
  CHECK(j["truncated_at_recorded_oom"] == false);
  const json& c = j["completed_by_prediction"];
  CHECK(c["predicted_requests"] == 6);
  CHECK(c["kept_recorded_requests"] == 1);
  CHECK(c["modules"] == json::array({"fc1", "fc2"}));
  CHECK(c["batches"] == json::array({4, 8}));
  CHECK(c["recorded_batch"] == 8);
  CHECK(c["method"] == "predicted at batch 8");
  j = whatif_json(dir, "--scale-batch 0.5");
  CHECK(j["reserved_peak_bytes"] == 190 * MiB);
  CHECK(j["completed_by_prediction"]["batch"] == 4.0);
  // The text says the rest was predicted, never "fits as far as the run got".
  Result text = sh(kEnv + kVramtrace + " whatif " + dir);
  CHECK(text.code() == 0);
  CHECK(text.out.find("predicted: the run died before its first step ended") != std::string::npos);
  CHECK(text.out.find("holds up to there") == std::string::npos);
  // The largest batch under 170 MiB: the cache is given back under pressure (the recorded
  // batch fits at 162 MiB), so it is above the recorded batch.
  j = whatif_json(dir, "--limit 170MiB --max-batch");
  CHECK(j["max_batch"]["scale"].get<double>() > 1.0);
  // As a batch size (the step's batch is known): 9, the report's and the plan's figure. A
  // completed step keeps 1.5 % of the limit free (175580774 B of 170 MiB): batch 9 (x1.125)
  // fits there at 166 MiB, batch 10 (x1.25) does not.
  CHECK(j["max_batch"]["batch"] == 9);
  CHECK(j["max_batch"]["recorded_batch"] == 8);
  CHECK(whatif_json(dir, "--limit 175580774B --scale-batch 1.125")["verdict"] == "fits");
  CHECK(whatif_json(dir, "--limit 175580774B --scale-batch 1.25")["verdict"] == "oom");
  Result most = sh(kEnv + kVramtrace + " whatif " + dir + " --limit 170MiB --max-batch");
  CHECK(most.out.find("  largest batch that fits: 9 (this one: 8)\n") != std::string::npos);
}

TEST_CASE("whatif: impossible side-channel lines: refused naming the line, or said") {
  // A third predicted step at the run's batch 8: the interpolation between the two at 8 divided
  // by zero. The first is kept and the replay says so (stderr, "problems"): at twice the batch
  // the step extrapolated from batches 4 and 8, 272 MiB (tests/unit/predict_test.cpp derives
  // it).
  const std::string dir = temp_dir() + "/twice";
  write_predicted_run(dir, "", true);
  Result r = sh(kEnv + kVramtrace + " whatif " + dir + " --json --scale-batch 2 2>&1 >/dev/null");
  CHECK(r.code() == 0);
  CHECK(r.out ==
        "vramtrace whatif: warning: pid 4242, device 0: the start-up hook's predicted steps 1 "
        "and 3 are both at batch 8: step 3 is left out\n");
  json j = whatif_json(dir, "--scale-batch 2");
  CHECK(j["reserved_peak_bytes"] == 272 * MiB);
  CHECK(j["problems"] == json::array({"pid 4242, device 0: the start-up hook's predicted steps 1 "
                                      "and 3 are both at batch 8: step 3 is left out"}));

  // A block of 2^64 - 1 bytes after the steps (it "fit" before): the reading stops there, and
  // whatif gives no verdict, naming the line (exit 2).
  const std::string huge = temp_dir() + "/huge";
  write_predicted_run(huge, "E\t0\talloc\t5000000000\t18446744073709551615\t0\t1000260000\t\t\n");
  r = sh(kEnv + kVramtrace + " whatif " + huge + " 2>&1");
  CHECK(r.code() == 2);
  CHECK(r.out.find("line 37: bad event: alloc of 18446744073709551615 bytes") != std::string::npos);
}

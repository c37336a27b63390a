// End-to-end tests of the allocator's view: a sub-allocator annotated through vramtrace.h that
// fragments and fails, PyTorch's allocator trace through the start-up hook (on the stand-in
// PyTorch of tests/programs/fake_torch), growth per iteration found from vramtrace_step(), NVTX
// ranges and the launch rhythm, and the ranked findings of an OOM.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/e2e_util.h"
#include "e2e/expected.h"

using nlohmann::json;

namespace {

const std::string kSrc = std::string(VT_SOURCE_DIR) + "/tests/programs/";

json run_json(const std::string& env, const std::string& args, const std::string& dir,
              std::string* out = nullptr) {
  Result r = sh(kEnv + env + " " + kVramtrace + " run -o " + dir + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  if (out) *out = r.out;
  std::ifstream in(dir + "/report.json");
  REQUIRE(in.good());
  return json::parse(in);
}

void check_fragmented(const json& f, uint64_t reserved) {
  REQUIRE(f["reserved_bytes"] == reserved);
  REQUIRE(f["in_use_bytes"] == 32 * MiB);
  REQUIRE(f["free_bytes"] == reserved - 32 * MiB);
  REQUIRE(f["free_blocks"] == 8);
  REQUIRE(f["largest_free_block_bytes"] == 4 * MiB);
  REQUIRE(f["blocks"] == 8);
}

std::string torch_env() { return fake_torch_env(); }

}  // namespace

TEST_CASE("a pool annotated through vramtrace.h: fragmentation and its OOM, exactly") {
  std::string dir = temp_dir(), out;
  json j = run_json("", "-- " + prog("frag_pool"), dir, &out);
  REQUIRE(contains(out, "frag_pool done (pool annotated)"));
  const json& pools = j["processes"][0]["devices"][0]["allocator"]["pools"];
  REQUIRE(pools.size() == 2);
  REQUIRE(pools[0]["name"] == "arena");
  REQUIRE(pools[0]["peak_in_use_bytes"] == 64 * MiB);
  REQUIRE(pools[0]["ooms"] == 1);
  check_fragmented(pools[0]["final"], 64 * MiB);
  REQUIRE(pools[0]["final"]["external_fragmentation"] == Approx(0.875).margin(1e-12));

  REQUIRE(j["oom"].size() == 1);  // the pool's; the driver never failed
  const json& o = j["oom"][0];
  REQUIRE(o["api"] == "pool arena");
  REQUIRE(o["requested_bytes"] == 8 * MiB);
  REQUIRE(o["allocator"]["pool"] == "arena");
  check_fragmented(o["fragmentation"], 64 * MiB);
  REQUIRE(o["live_bytes"] == 64 * MiB);  // the segment, as the driver sees it
  REQUIRE(o["findings"][0]["rank"] == 1);
  REQUIRE(o["findings"][0]["kind"] == "fragmentation");
  REQUIRE(o["findings"][0]["title"] ==
          "32.00 MiB reserved by arena was free, in 8 blocks, but the largest (4.00 MiB) is "
          "smaller than the request (8.00 MiB)");
  REQUIRE(o["findings"][0]["evidence"]["largest_free_block_bytes"] == 4 * MiB);
  REQUIRE(o["findings"][0]["evidence"]["free_reserved_bytes"] == 32 * MiB);
  REQUIRE(contains(out, "likely cause: 32.00 MiB reserved by arena was free, in 8 blocks"));

  // At exit: the arena's 8 blocks in use are the leak suspects, not its segment; what both
  // pools hold free is retained (cached), not leaked.
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["bytes"] == 32 * MiB);
  REQUIRE(j["leaks"][0]["count"] == 8);
  REQUIRE(j["retained"].size() == 2);
  REQUIRE(j["retained"][0]["pool"] == "arena");
  REQUIRE(j["retained"][0]["retained_bytes"] == 32 * MiB);
  REQUIRE(j["retained"][1]["pool"] == "cache");
  REQUIRE(j["retained"][1]["retained_bytes"] == 16 * MiB);
  REQUIRE(j["processes"][0]["devices"][0]["retained_segment_bytes"] == 80 * MiB);
}

TEST_CASE("vramtrace.h is a no-op without vramtrace") {
  Result r = sh(kEnv + prog("frag_pool"));
  REQUIRE(r.code() == 0);
  REQUIRE(r.out == "frag_pool done (pool absent)\n");
}

TEST_CASE("growth per iteration, with iterations from vramtrace_step, NVTX or kernels") {
  const std::string keep = "keep_history() (" + kSrc + "leak_steps.cu:24)";
  struct Mode {
    const char* arg;
    std::string source;
  };
  for (const Mode& m : {Mode{"step", "vramtrace_step()"}, Mode{"nvtx", "NVTX range 'train_step'"},
                        Mode{"kernel", "kernel step_begin(float*) (every 3 launches)"}}) {
    SECTION(m.arg) {
      std::string dir = temp_dir(), out;
      json j = run_json("", "-- " + prog("leak_steps") + " " + m.arg, dir, &out);
      const json& it = j["processes"][0]["iterations"];
      REQUIRE(it["count"] == 10);
      REQUIRE(it["source"] == m.source);
      REQUIRE(j["growth"].size() == 1);
      const json& g = j["growth"][0];
      REQUIRE(g["site"] == keep);
      REQUIRE(g["bytes_per_iteration"] == 1 * MiB);
      REQUIRE(g["iterations"] == 10);
      REQUIRE(g["first_iteration"] == 0);
      REQUIRE(g["last_iteration"] == 9);
      REQUIRE(g["bytes"] == 10 * MiB);
      REQUIRE(contains(out, "grows by 1.00 MiB per iteration over 10 iterations: " + keep));
      // The 4 MiB of weights made before the first iteration are live at exit too, but do not
      // grow: a leak suspect, not growth.
      REQUIRE(j["leaks"].size() == 2);
      if (std::string(m.arg) == "nvtx") {
        const json& ph = j["processes"][0]["phases"];
        REQUIRE(ph["total"] == 10);
        REQUIRE(ph["by_name"][0]["name"] == "train_step");
        REQUIRE(ph["by_name"][0]["count"] == 10);
        REQUIRE(ph["ranges"].size() == 10);
        REQUIRE(j["devices"][0]["peak"]["phase"] == "train_step");
        // Every allocation in an iteration was made inside the range.
        for (const auto& a : j["devices"][0]["peak"]["largest"])
          if (a["bytes"] != 4 * MiB) REQUIRE(a["phase"] == "train_step");
      } else {
        REQUIRE_FALSE(j["processes"][0].contains("phases"));
      }
    }
  }
}

// Every string of a JSON value, keys' values at any depth.
static void strings_of(const json& j, std::vector<std::string>& out) {
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_structured())
    for (const auto& v : j) strings_of(v, out);
}

TEST_CASE("a native program's OOM of growth: CUDA's advice in every text, none of PyTorch's") {
  // 4 MiB of weights, 8 MiB of scratch and 1 MiB kept per iteration on an 18 MiB device:
  // keep_history() runs out in iteration 6.
  std::string dir = temp_dir();
  Result r = sh(kEnv + "VRAMTRACE_STANDIN_DEVICE_BYTES=" + std::to_string(18 * MiB) + " " +
                kVramtrace + " run -o " + dir + " -- " + prog("leak_steps") + " step");
  INFO(r.out);
  REQUIRE(r.code() == 99);  // the program's CHECK failed
  std::ifstream in(dir + "/report.json");
  const json j = json::parse(in);
  const json& f = j["oom"][0]["findings"];
  REQUIRE(f.size() == 2);
  REQUIRE(f[0]["kind"] == "growth");
  REQUIRE(f[0]["suggestion"] ==
          "Memory is kept across iterations: free (cudaFree/cudaFreeAsync) what each iteration "
          "allocates before the next one, or reuse one buffer sized for the largest iteration.");
  REQUIRE(f[1]["kind"] == "near_capacity");
  REQUIRE(f[1]["suggestion"] ==
          "Use less memory at the peak: process the data in smaller chunks (smaller buffers or "
          "batches), reuse buffers across steps (a stream-ordered pool, cudaMallocAsync, with a "
          "release threshold), and free temporaries before the largest request.");
  std::vector<std::string> texts;
  strings_of(j, texts);
  for (const std::string& t : texts)
    for (const char* torch : {"loss.item", ".detach", "checkpointing", "mixed precision", "bf16",
                              "torch", "PyTorch", "tensor"})
      CHECK_FALSE(contains(t, torch));
  REQUIRE_FALSE(contains(r.out, "loss.item"));
}

TEST_CASE("a native loop of one kernel per iteration: iterations and growth per iteration") {
  std::string dir = temp_dir(), out;
  json j = run_json("", "-- " + prog("native_loop"), dir, &out);
  REQUIRE(contains(out, "native_loop done"));
  // exit(0) writes no ExitStatus record: the trace stays readable by older readers.
  REQUIRE(j["processes"][0]["clean_exit"] == true);
  REQUIRE_FALSE(j["processes"][0].contains("exit_status"));
  expected::require_expected(j, "native_loop");
  REQUIRE(j["growth"].size() == 1);
  const json& g = j["growth"][0];
  REQUIRE(g["iterations"] == 40);
  REQUIRE(g["first_iteration"] == 0);
  REQUIRE(g["last_iteration"] == 39);
  REQUIRE(g["bytes"] == 40 * 64 * MiB);
  REQUIRE(contains(out, "grows by 64.00 MiB per iteration over 40 iterations: main (" + kSrc +
                            "native_loop.cu:24)"));
  // The growth is the diagnosis' cause, and the remedy is CUDA's: freeing each iteration's
  // buffer leaves one of them, 64 MiB, at the peak.
  const json& dg = j["diagnosis"];
  REQUIRE_FALSE(dg.contains("oom_index"));
  REQUIRE_FALSE(dg.contains("fatal"));
  REQUIRE(dg["cause"]["kind"] == "growth");
  REQUIRE(dg["remedies"].size() == 1);
  REQUIRE(dg["remedies"][0]["kind"] == "free_per_iteration");
  REQUIRE(dg["remedies"][0]["saves_bytes"] == 40 * 64 * MiB);
  REQUIRE(dg["remedies"][0]["predicted_peak_bytes"] == 64 * MiB);
}

TEST_CASE("a native loop that runs out and exits 3 right after: the OOM is the fatal one") {
  const std::string small = "VRAMTRACE_STANDIN_DEVICE_BYTES=1048576000 ";
  for (const bool launcher : {true, false}) {
    DYNAMIC_SECTION((launcher ? "launcher" : "LD_PRELOAD file mode")) {
      std::string dir = temp_dir();
      Result r =
          launcher ? sh(kEnv + small + kVramtrace + " run -o " + dir + " -- " + prog("native_loop"))
                   : sh(kEnv + small + "VRAMTRACE_OUTPUT=" + dir + "/t.vtrace LD_PRELOAD=" + kLib +
                        " " + prog("native_loop"));
      INFO(r.out);
      REQUIRE(r.code() == 3);
      REQUIRE(contains(r.out, "native_loop: out of memory keeping 64 MiB at iteration 15"));
      if (!launcher) {
        Result rep = sh(kEnv + kVramtrace + " report " + dir + "/t.vtrace -o " + dir + "/rep");
        INFO(rep.out);
        REQUIRE(rep.code() == 0);
      }
      json j = load_json(dir + (launcher ? "" : "/rep") + "/report.json");
      expected::require_expected(j, "native_loop_oom");
      REQUIRE(j["oom"].size() == 1);
      REQUIRE(j["processes"][0]["clean_exit"] == true);
      REQUIRE(j["processes"][0]["exit_status"] == 3);
      // The verdict says it died of it, the growth leads, and the advice is CUDA's, never
      // PyTorch's: free each iteration's buffer (64 MiB left, the request's own), or shrink the
      // working set by the 24 MiB it was over the 1000 MiB device.
      const json& dg = j["diagnosis"];
      REQUIRE(dg["verdict"] == "oom");
      // The OOM it is about, named for the page: report.json's only OOM, which ended the process.
      REQUIRE(dg["oom_index"] == 0);
      REQUIRE(dg["fatal"] == true);
      REQUIRE(j["oom"][0]["fatal"] == true);
      REQUIRE(dg["cause"]["kind"] == "growth");
      REQUIRE(dg["remedies"].size() == 2);
      REQUIRE(dg["remedies"][0]["kind"] == "free_per_iteration");
      REQUIRE(dg["remedies"][0]["saves_bytes"] == 15 * 64 * MiB);
      REQUIRE(dg["remedies"][0]["predicted_peak_bytes"] == 64 * MiB);
      REQUIRE(dg["remedies"][1]["kind"] == "smaller_working_set");
      REQUIRE(dg["remedies"][1]["saves_bytes"] == 24 * MiB);
      REQUIRE(dg["remedies"][1]["leaves_growth"] == true);
    }
  }
}

TEST_CASE("growth that the program frees at its end is seen at the peak") {
  std::string dir = temp_dir();
  json j = run_json("", "-- " + prog("leak_steps") + " step free", dir);
  REQUIRE(j["growth"].size() == 1);
  REQUIRE(j["growth"][0]["seen_at"] == "peak");
  REQUIRE(j["growth"][0]["bytes_per_iteration"] == 1 * MiB);
  REQUIRE(j["growth"][0]["iterations"] == 10);
  REQUIRE(j["leaks"].size() == 1);  // the weights alone are still live at exit
  REQUIRE(j["leaks"][0]["bytes"] == 4 * MiB);
}

TEST_CASE("PyTorch's allocator trace through the start-up hook: fragmentation OOM") {
  std::string dir = temp_dir(), out;
  json j =
      run_json(torch_env(), "--torch=stacks -- python3 " + kSrc + "py_torch_frag.py", dir, &out);
  REQUIRE(contains(out, "caught: CUDA out of memory"));
  REQUIRE(contains(out, "py_torch_frag done 0.0+standin"));
  const json& p = j["processes"][0];
  REQUIRE(p["torch_allocator_trace"]["merged"] == true);
  REQUIRE_FALSE(p["torch_allocator_trace"].contains("problem"));
  REQUIRE(j["run"]["problems"].empty());
  const json& pools = p["devices"][0]["allocator"]["pools"];
  REQUIRE(pools.size() == 1);
  REQUIRE(pools[0]["name"] == "PyTorch caching allocator");
  REQUIRE(pools[0]["peak_reserved_bytes"] == 64 * MiB);
  REQUIRE(pools[0]["peak_in_use_bytes"] == 64 * MiB);
  // The driver's failed cuMemAlloc of the new 20 MiB segment and PyTorch's OOM are one OOM.
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE(o["api"] == "cuMemAlloc");
  REQUIRE(o["requested_bytes"] == 20 * MiB);
  REQUIRE(o["allocator"]["requested_bytes"] == 8 * MiB);
  REQUIRE(o["allocator"]["pool"] == "PyTorch caching allocator");
  check_fragmented(o["fragmentation"], 64 * MiB);
  REQUIRE(o["findings"][0]["kind"] == "fragmentation");
  REQUIRE(contains(o["findings"][0]["suggestion"].get<std::string>(),
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  REQUIRE(o["findings"][1]["kind"] == "near_capacity");  // 64 + 20 MiB of an 80 MiB device
  // The blocks still in use at exit are the suspects, at the script's line; PyTorch's segment
  // is retained.
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["bytes"] == 32 * MiB);
  REQUIRE(contains(j["leaks"][0]["site"].get<std::string>(), "py_torch_frag.py:13)"));
  REQUIRE(j["retained"][0]["retained_bytes"] == 32 * MiB);
  // The trace file is the user's only.
  bool found = false;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".torch") {
      found = true;
      auto perms = std::filesystem::status(e.path()).permissions();
      REQUIRE((perms & std::filesystem::perms::all) ==
              (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
    }
  REQUIRE(found);
  // `vramtrace report DIR` merges it again from the directory.
  std::string again = temp_dir();
  Result r = sh(kVramtrace + " report -o " + again + " " + dir);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json k = json::parse(slurp(again + "/report.json"));
  REQUIRE(k["oom"][0]["fragmentation"]["largest_free_block_bytes"] == 4 * MiB);
}

TEST_CASE("PyTorch's allocator trace by default: exact figures, every block's line") {
  // A program that runs no forward, backward or step is between the phases all along: the
  // start-up hook leaves the allocator trace's frames on, and each block has its line.
  std::string dir = temp_dir();
  json j = run_json(torch_env(), "-- python3 " + kSrc + "py_torch_frag.py", dir);
  check_fragmented(j["oom"][0]["fragmentation"], 64 * MiB);
  REQUIRE(j["oom"][0]["findings"][0]["kind"] == "fragmentation");
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["bytes"] == 32 * MiB);
  const std::string site = j["leaks"][0]["site"];
  REQUIRE(site.size() > 20);
  REQUIRE(site.substr(site.size() - 20) == "py_torch_frag.py:13)");
  // Without the hook's context the trace has no frames: the hint says how to get them.
  std::string bare = temp_dir();
  json k = run_json(torch_env() + " VRAMTRACE_TORCH_CONTEXT=off",
                    "-- python3 " + kSrc + "py_torch_frag.py", bare);
  REQUIRE(k["leaks"][0]["bytes"] == 32 * MiB);
  REQUIRE(k["leaks"][0]["site"] ==
          "(pool block, no stack; for PyTorch: vramtrace run --torch=stacks)");
}

TEST_CASE("run --torch=off leaves PyTorch alone") {
  std::string dir = temp_dir();
  json j = run_json(torch_env(), "--torch=off -- python3 " + kSrc + "py_torch_frag.py", dir);
  REQUIRE_FALSE(j["processes"][0].contains("torch_allocator_trace"));
  REQUIRE_FALSE(j["processes"][0]["devices"][0].contains("allocator"));
  REQUIRE(j["oom"].size() == 1);
  REQUIRE_FALSE(j["oom"][0].contains("fragmentation"));
  REQUIRE(j["oom"][0]["findings"][0]["kind"] == "near_capacity");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    REQUIRE(e.path().extension() != ".torch");
}

TEST_CASE("a corrupt PyTorch allocator trace is reported, the rest of the report stands") {
  std::string dir = temp_dir();
  json j = run_json(torch_env(), "-- python3 " + kSrc + "py_torch_frag.py", dir);
  std::string torch_file;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".torch") torch_file = e.path().string();
  REQUIRE(!torch_file.empty());
  // Cut it in the middle of its events: what came before is merged, the problem is named.
  std::string text = slurp(torch_file);
  size_t cut = text.find("\nE\t", text.find("\nE\t", text.find("\nE\t") + 1) + 1);
  {
    std::ofstream f(torch_file, std::ios::trunc);
    f << text.substr(0, cut + 1) << "E\t0\talloc\tnot-a-number\n";
  }
  std::string again = temp_dir();
  Result r = sh(kVramtrace + " report -o " + again + " " + dir);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "bad event"));
  json k = json::parse(slurp(again + "/report.json"));
  REQUIRE(k["devices"][0]["peak"]["bytes"] == 64 * MiB);
  REQUIRE(k["processes"][0]["torch_allocator_trace"]["problem"].get<std::string>().find(
              "bad event") != std::string::npos);
  // Not a PyTorch trace at all: refused with its name, the CUDA trace still reported.
  {
    std::ofstream f(torch_file, std::ios::trunc);
    f << "hello\n";
  }
  r = sh(kVramtrace + " report --force -o " + again + " " + dir);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "not a PyTorch allocator trace"));
}

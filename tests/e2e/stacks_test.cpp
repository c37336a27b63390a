// End-to-end tests of stacks: who allocated each byte (function, file, line, library), through
// a known call chain, a library dlopen'd after CUDA started, 16 threads at once and a Python
// script, and the run options that turn stacks off or shorten them.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e/e2e_util.h"
#include "e2e/expected.h"

using nlohmann::json;

namespace {

const std::string kSrc = std::string(VT_SOURCE_DIR) + "/tests/programs/";

json run_json(const std::string& args, const std::string& dir) {
  Result r = sh(kEnv + kVramtrace + " run -o " + dir + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  std::ifstream in(dir + "/report.json");
  REQUIRE(in.good());
  return json::parse(in);
}

// The stack runs from the allocating call in libcudart down to the thread's first frame.
void check_stack_shape(const json& stack, const std::string& root_function) {
  REQUIRE(stack.size() >= 4);
  bool cudart = false;
  for (const json& f : stack) {
    if (f.value("python", false)) continue;
    REQUIRE(!f["module"].get<std::string>().empty());
    if (f["function"] == "cudaMalloc") cudart = true;
  }
  REQUIRE(cudart);
  REQUIRE(stack.back()["function"] == root_function);
}

}  // namespace

TEST_CASE("stacks: the site is the calling function, file and line, the library the executable") {
  std::string dir = temp_dir();
  json j = run_json("-- " + prog("callchain"), dir);
  const std::string weights = "allocate_weights(unsigned long) (" + kSrc + "callchain.cu:8)";
  const std::string scratch = "allocate_scratch() (" + kSrc + "callchain.cu:14)";
  const json& peak = j["devices"][0]["peak"];
  expected::require_expected(j, "callchain");
  REQUIRE(peak["by_site"].size() == 2);
  REQUIRE(peak["by_site"][0]["site"] == weights);
  REQUIRE(peak["by_site"][0]["bytes"] == 8 * MiB);
  REQUIRE(peak["by_site"][0]["library"] == "callchain");
  REQUIRE(peak["by_site"][1]["site"] == scratch);
  REQUIRE(peak["by_library"] ==
          json::parse(R"([{"library":"callchain","bytes":9437184,"count":2}])"));
  REQUIRE(peak["by_stack"].size() == 2);

  const json& largest = peak["largest"][0];
  REQUIRE(largest["bytes"] == 8 * MiB);
  REQUIRE(largest["site"] == weights);
  REQUIRE(largest["library"] == "callchain");
  const json& stack = largest["stack"];
  check_stack_shape(stack, "_start");
  // allocate_weights, called from main at line 19, below the toolkit's cudaMalloc<float>.
  size_t at = 0;
  while (at < stack.size() && stack[at]["function"] != "allocate_weights(unsigned long)") ++at;
  REQUIRE(at + 1 < stack.size());
  REQUIRE(stack[at]["file"] == kSrc + "callchain.cu");
  REQUIRE(stack[at]["line"] == 8);
  REQUIRE(stack[at - 1]["function"] == "cudaError cudaMalloc<float>(float**, unsigned long)");
  REQUIRE(stack[at + 1]["function"] == "main");
  REQUIRE(stack[at + 1]["line"] == 19);

  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["site"] == scratch);
  REQUIRE(j["leaks"][0]["library"] == "callchain");
  REQUIRE(j["leaks"][0]["bytes"] == 1 * MiB);
}

TEST_CASE("stacks: a library dlopen'd after CUDA started is symbolized and owns its memory") {
  std::string dir = temp_dir();
  json j = run_json("-- " + prog("dlopener") + " " + prog("libdl_alloc.so"), dir);
  REQUIRE(j["leaks"].size() == 1);
  const json& leak = j["leaks"][0];
  REQUIRE(leak["bytes"] == 3 * MiB);
  REQUIRE(leak["site"] == "dl_allocate (" + kSrc + "libdl_alloc.cu:7)");
  REQUIRE(leak["library"] == "libdl_alloc.so");
  check_stack_shape(leak["stack"], "_start");
  REQUIRE(j["devices"][0]["peak"]["by_library"][0]["library"] == "libdl_alloc.so");
}

TEST_CASE("stacks: 16 threads allocating at once, every event there and every stack whole") {
  std::string dir = temp_dir();
  json j = run_json("--stacks=native -- " + prog("threads"), dir);
  const json& d = j["devices"][0];
  REQUIRE(d["apis"]["cuMemAlloc"]["calls"] == 1616);
  REQUIRE(d["apis"]["cuMemFree"]["calls"] == 1600);
  REQUIRE(d["final_live_bytes"] == 16 * MiB);
  REQUIRE(j["run"]["dropped_events"] == 0);
  REQUIRE(j["processes"][0]["devices"][0]["unmatched_frees"] == 0);
  // The 16 kept buffers come from one place: the threads' lambda, in the executable.
  REQUIRE(j["leaks"].size() == 1);
  const json& leak = j["leaks"][0];
  REQUIRE(leak["count"] == 16);
  REQUIRE(leak["bytes"] == 16 * MiB);
  REQUIRE(leak["library"] == "threads");
  REQUIRE(contains(leak["site"].get<std::string>(), "main::{lambda()#1}"));
  check_stack_shape(leak["stack"], "__clone3");
  REQUIRE(d["peak"]["by_library"].size() == 1);
  REQUIRE(d["peak"]["by_library"][0]["library"] == "threads");
}

TEST_CASE("stacks: a Python caller's own file and line, with the GIL held") {
  if (sh("python3 -c 'import ctypes'").code() != 0) {
    WARN("python3 not found: the Python stacks test does not run");
    return;
  }
  std::string dir = temp_dir();
  json j =
      run_json("-- python3 " + kSrc + "py_alloc.py " + kBuild + "/standin/libcudart.so.13", dir);
  const json& peak = j["devices"][0]["peak"];
  REQUIRE(peak["bytes"] == 6 * MiB);
  REQUIRE(peak["by_site"].size() == 2);
  REQUIRE(peak["by_site"][0]["site"] == "load_model (" + kSrc + "py_alloc.py:15)");
  REQUIRE(peak["by_site"][1]["site"] == "main (" + kSrc + "py_alloc.py:22)");
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["site"] == "load_model (" + kSrc + "py_alloc.py:15)");
  // The Python frames stand where the interpreter's were: load_model, main, <module>.
  const json& stack = j["leaks"][0]["stack"];
  std::vector<std::string> py;
  for (const json& f : stack)
    if (f.value("python", false))
      py.push_back(f["function"].get<std::string>() + ":" + std::to_string(f["line"].get<int>()));
  REQUIRE(py == std::vector<std::string>{"load_model:15", "main:20", "<module>:27"});
  for (const json& f : stack) REQUIRE(f["function"] != "_PyEval_EvalFrameDefault");

  // Python frames only: no native frame at all.
  std::string only = temp_dir();
  json p = run_json(
      "--stacks=python -- python3 " + kSrc + "py_alloc.py " + kBuild + "/standin/libcudart.so.13",
      only);
  REQUIRE(p["leaks"][0]["site"] == "load_model (" + kSrc + "py_alloc.py:15)");
  REQUIRE(p["leaks"][0]["stack"].size() == 3);
  REQUIRE(p["leaks"][0]["library"] == "");
}

TEST_CASE("stacks: Python frames without the GIL (ctypes.CDLL), on each CPython 3.10-3.13") {
  // The direct frame reader: the allocating thread released the GIL before cudaMalloc, as
  // PyTorch does. Every pyenv CPython found here runs; a native thread gets no Python frames.
  std::string ran;
  for (const char* v : {"3.10", "3.11", "3.12", "3.13"}) {
    Result found = sh("ls -d /root/.pyenv/versions/" + std::string(v) +
                      ".*/bin/python3 2>/dev/null"
                      " | head -1");
    std::string py = found.out.substr(0, found.out.find('\n'));
    if (found.code() != 0 || py.empty()) continue;
    INFO("python " << py);
    std::string dir = temp_dir();
    json j =
        run_json("-- " + py + " " + kSrc + "py_nogil.py " + kBuild + "/standin/libcudart.so.13 " +
                     kBuild + "/tests/programs/libnative_thread.so",
                 dir);
    const json& peak = j["devices"][0]["peak"];
    REQUIRE(peak["bytes"] == 6 * MiB);
    REQUIRE(peak["by_site"].size() == 2);
    REQUIRE(peak["by_site"][0]["site"] == "load_model (" + kSrc + "py_nogil.py:17)");
    REQUIRE(peak["by_site"][1]["site"] == "main (" + kSrc + "py_nogil.py:24)");
    REQUIRE(j["leaks"].size() == 2);
    REQUIRE(j["leaks"][0]["site"] == "load_model (" + kSrc + "py_nogil.py:17)");
    std::vector<std::string> frames;
    for (const json& f : j["leaks"][0]["stack"])
      if (f.value("python", false))
        frames.push_back(f["function"].get<std::string>() + ":" +
                         std::to_string(f["line"].get<int>()));
    REQUIRE(frames == std::vector<std::string>{"load_model:17", "main:22", "<module>:32"});
    // The plain native thread: its own native site, and no Python frame at all.
    const json& native = j["leaks"][1];
    REQUIRE(contains(native["site"].get<std::string>(), "libnative_thread.cu:9"));
    for (const json& f : native["stack"]) REQUIRE(!f.value("python", false));
    ran += std::string(ran.empty() ? "" : ", ") + v;
  }
  WARN("Python versions run without the GIL: " + (ran.empty() ? std::string("none") : ran));
}

TEST_CASE("stacks: --stacks=none keeps the API as the site, --max-depth bounds the stack") {
  std::string dir = temp_dir();
  json none = run_json("--stacks=none -- " + prog("callchain"), dir);
  REQUIRE(none["leaks"][0]["site"] == "cuMemAlloc");
  REQUIRE(none["leaks"][0]["stack"].empty());
  REQUIRE(none["leaks"][0]["library"] == "");
  REQUIRE(none["devices"][0]["peak"]["by_library"][0]["library"] == "(unknown)");

  std::string short_dir = temp_dir();
  json shallow = run_json("--max-depth 3 -- " + prog("callchain"), short_dir);
  REQUIRE(shallow["leaks"][0]["stack"].size() == 3);

  // The same variables work in preload mode.
  std::string pre = temp_dir();
  Result r = sh("cd " + pre + " && " + kEnv + "VRAMTRACE_STACKS=none LD_PRELOAD=" + kLib + " " +
                prog("callchain"));
  REQUIRE(r.out == "callchain done\n");
  Result rep = sh(kVramtrace + " report " + pre + " -o " + pre);
  REQUIRE(rep.code() == 0);
  std::ifstream in(pre + "/report.json");
  REQUIRE(json::parse(in)["leaks"][0]["site"] == "cuMemAlloc");
}

TEST_CASE("stacks: an out-of-memory request names its own site and the live set by library") {
  std::string dir = temp_dir();
  Result r = sh(kEnv + "VRAMTRACE_STANDIN_DEVICE_BYTES=67108864 " + kVramtrace + " run -o " + dir +
                " -- " + prog("oom"));
  INFO(r.out);
  REQUIRE(r.code() == 0);
  std::ifstream in(dir + "/report.json");
  json j = json::parse(in);
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE(o["library"] == "oom");
  check_stack_shape(o["stack"], "_start");
  REQUIRE(o["live_by_library"] == json::parse(R"([{"library":"oom","bytes":50331648,"count":1}])"));
}

TEST_CASE("stream-ordered allocations get stacks when large or in mode all, not per tensor") {
  // grow 8 makes one 8 MiB cudaMallocAsync from grow_activations().
  auto site_of_async = [](const std::string& env) {
    std::string d = temp_dir();
    Result r = sh(kEnv + env + " " + kVramtrace + " run -o " + d + " -- " + prog("grow") + " 8");
    REQUIRE(r.code() == 0);
    json j = json::parse(slurp(d + "/report.json"));
    for (const auto& a : j["processes"][0]["devices"][0]["peak"]["largest"])
      if (a["api"] == "cuMemAllocAsync") return a["site"].get<std::string>();
    return std::string("(none)");
  };
  REQUIRE(site_of_async("") == "cuMemAllocAsync");  // auto: 8 MiB is below the 64 MiB default
  REQUIRE(contains(site_of_async("VRAMTRACE_STACKS=all"), "grow_activations"));
  REQUIRE(contains(site_of_async("VRAMTRACE_ASYNC_STACK_MIN_BYTES=8388608"), "grow_activations"));
}

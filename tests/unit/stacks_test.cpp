// Unit tests of stacks in the collector: the trace tree (StackNode, PyStackNode, PyCode), the
// AllocStack that names an allocation's leaves, the module map across dlopen/dlclose, and the
// site and owning library derived from them (no symbols: the module files do not exist).
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "collector/analysis/analysis.h"
#include "collector/analysis/stacks.h"
#include "collector/model/model.h"
#include "report/json_report.h"
#include "unit/trace_builder.h"

using namespace vramtrace;
using vt_test::Api;
using vt_test::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;

collector::Run run_of(std::vector<uint8_t> stream) {
  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  readers.push_back(collector::TraceReader::from_bytes(std::move(stream)));
  return collector::model_of(std::move(readers));
}

// app (main) -> libfoo.so -> libcudart.so.13: nodes 1 <- 2 <- 3.
TraceBuilder traced() {
  TraceBuilder b;
  b.context(0, 1024 * MiB)
      .module(1, 0, 0x400000, 0x500000, "/nonexistent/app")
      .module(1, 0x10000, 0x10000, 0x20000, "/nonexistent/libfoo.so")
      .module(1, 0x7f0000, 0x7f0000, 0x800000, "/nonexistent/libcudart.so.13")
      .stack_node(1, 0, 0x400100)
      .stack_node(2, 1, 0x10200)
      .stack_node(3, 2, 0x7f0040)
      .alloc_stack(3)
      .alloc(0xa, 1 * MiB)
      .alloc_stack(2)  // a shorter stack reuses the tree's nodes
      .alloc(0xb, 2 * MiB);
  return b;
}

}  // namespace

TEST_CASE("the trace tree: an allocation names its leaf, resolved against the module map") {
  TraceBuilder b = traced();
  // dlclose(libfoo), dlopen(libbar): a new generation of the map.
  b.module(2, 0, 0x400000, 0x500000, "/nonexistent/app")
      .module(2, 0x30000, 0x30000, 0x40000, "/nonexistent/libbar.so")
      .stack_node(4, 1, 0x30010)
      .stack_node(5, 1, 0x10200)  // where libfoo was: in no module any more
      .alloc_stack(4)
      .alloc(0xc, 4 * MiB)
      .alloc_stack(5)
      .alloc(0xd, 8 * MiB)
      .alloc(0xe, 16 * MiB);  // no AllocStack: no stack
  collector::Run run = run_of(b.bytes());
  REQUIRE(run.problems.empty());
  const collector::ProcessModel& p = run.processes[0];
  REQUIRE(p.modules.size() == 4);  // app once, libfoo, libcudart, libbar
  REQUIRE(p.stack_nodes.size() == 5);
  REQUIRE(p.stack_nodes.at(3).parent == 2);
  REQUIRE(p.stack_nodes.at(5).module == -1);
  REQUIRE(p.live.at(0xa).stack == 3);
  REQUIRE(p.live.at(0xb).stack == 2);
  REQUIRE(p.live.at(0xc).stack == 4);
  REQUIRE(p.live.at(0xe).stack == 0);

  collector::Symbolizer symbols;
  collector::StackResolver stacks(p, symbols);
  const collector::Attribution& a = stacks.attribute(3, 0);
  REQUIRE(a.frames.size() == 3);
  REQUIRE(a.frames[0].module == "/nonexistent/libcudart.so.13");
  REQUIRE(a.frames[0].offset == 0x40);
  REQUIRE(a.frames[0].internal);
  REQUIRE(a.frames[1].offset == 0x200);  // relative to the load bias
  REQUIRE(a.frames[2].offset == 0x400100);
  REQUIRE(a.site == "libfoo.so+0x200");  // the first frame outside the CUDA runtime
  REQUIRE(a.library == "libfoo.so");
  REQUIRE(stacks.attribute(4, 0).site == "libbar.so+0x10");
  REQUIRE(stacks.attribute(4, 0).library == "libbar.so");
  REQUIRE(stacks.attribute(5, 0).site == "??+0x10200");
  REQUIRE(stacks.attribute(5, 0).library == "app");  // the next frame with a module

  nlohmann::json j = report::to_json(run);
  const auto& peak = j["devices"][0]["peak"];
  REQUIRE(peak["bytes"] == 31 * MiB);
  REQUIRE(peak["by_library"] == nlohmann::json::parse(R"J([
      {"library": "(unknown)", "bytes": 16777216, "count": 1},
      {"library": "app", "bytes": 8388608, "count": 1},
      {"library": "libbar.so", "bytes": 4194304, "count": 1},
      {"library": "libfoo.so", "bytes": 3145728, "count": 2}])J"));
  REQUIRE(peak["largest"][0]["site"] == "cuMemAlloc");
  REQUIRE(peak["largest"][0]["stack"].empty());
  REQUIRE(peak["largest"][2]["site"] == "libbar.so+0x10");
  REQUIRE(peak["largest"][2]["stack"].size() == 2);
  REQUIRE(peak["largest"][2]["stack"][1]["module"] == "/nonexistent/app");
  // Four stacks, plus the allocation recorded without one (grouped by its api): the groups add
  // up to the whole peak.
  REQUIRE(peak["by_stack"].size() == 5);
  REQUIRE(peak["by_stack"][0]["site"] == "cuMemAlloc");
  REQUIRE(peak["by_stack"][0]["stack"].empty());
  uint64_t sum = 0;
  for (const auto& g : peak["by_stack"]) sum += g["bytes"].get<uint64_t>();
  REQUIRE(sum == 31 * MiB);
}

TEST_CASE("Python frames: interned codes, the innermost frame is the site") {
  TraceBuilder b = traced();
  b.py_code(1, "train.py", "<module>")
      .py_code(2, "model.py", "build")
      .py_node(6, 0, 1, 90)
      .py_node(7, 6, 2, 12)
      .alloc_stack(3, 7)
      .alloc(0xc, 4 * MiB)
      .alloc_stack(0, 6)
      .alloc(0xd, 8 * MiB);
  collector::Run run = run_of(b.bytes());
  const collector::ProcessModel& p = run.processes[0];
  collector::Symbolizer symbols;
  collector::StackResolver stacks(p, symbols);
  const collector::Attribution& a = stacks.attribute(3, 7);
  REQUIRE(a.site == "build (model.py:12)");
  REQUIRE(a.library == "libfoo.so");
  // Without the interpreter's frames (no symbols), Python frames follow the native ones.
  REQUIRE(a.frames.size() == 5);
  REQUIRE(a.frames[3].python);
  REQUIRE(a.frames[3].function == "build");
  REQUIRE(a.frames[4].line == 90);
  const collector::Attribution& only = stacks.attribute(0, 6);
  REQUIRE(only.site == "<module> (train.py:90)");
  REQUIRE(only.library == "");
  nlohmann::json j = report::to_json(run);
  REQUIRE(j["devices"][0]["peak"]["by_site"][0]["site"] == "<module> (train.py:90)");
  REQUIRE(j["devices"][0]["peak"]["by_site"][1]["site"] == "build (model.py:12)");
}

TEST_CASE("Python frames of vramtrace's start-up hook are kept in the stack, never the site") {
  // The program's line calls the model; the hook's Module.__call__ wrapper runs in between;
  // PyTorch's own frames are innermost.
  TraceBuilder b = traced();
  b.py_code(1, "/work/train.py", "<module>")
      .py_code(2, "/work/out/.python/sitecustomize.py", "traced_call")
      .py_code(3, "/usr/lib/python3/site-packages/torch/nn/modules/conv.py", "forward")
      .py_node(6, 0, 1, 36)
      .py_node(7, 6, 2, 373)
      .py_node(8, 7, 3, 548)
      .alloc_stack(0, 8)
      .alloc(0xc, 4 * MiB)
      .alloc_stack(0, 7)  // made in the hook itself, under the program's line
      .alloc(0xd, 2 * MiB);
  collector::Run run = run_of(b.bytes());
  collector::Symbolizer symbols;
  collector::StackResolver stacks(run.processes[0], symbols);
  const collector::Attribution& a = stacks.attribute(0, 8);
  REQUIRE(a.site == "<module> (/work/train.py:36)");
  REQUIRE(a.frames.size() == 3);
  REQUIRE(a.frames[1].function == "traced_call");
  REQUIRE(a.frames[1].internal);
  REQUIRE_FALSE(a.frames[0].internal);
  REQUIRE_FALSE(a.frames[2].internal);
  REQUIRE(stacks.attribute(0, 7).site == "<module> (/work/train.py:36)");
  // A stack of the hook alone has no site of the program's: no line rather than the hook's.
  b = traced();
  b.py_code(2, "/work/out/.python/sitecustomize.py", "dump").py_node(6, 0, 2, 50);
  collector::Run hook_only = run_of(b.bytes());
  collector::StackResolver only(hook_only.processes[0], symbols);
  REQUIRE(only.attribute(0, 6).site.empty());
  // The hook's parts beside it are its frames too; a user's file named like a module is not.
  b = traced();
  b.py_code(1, "/work/train.py", "<module>")
      .py_code(2, "/tmp/vramtrace-hook-x/_vramtrace_context.py", "root_pre")
      .py_code(3, "/work/_vramtrace_notes.txt", "f")
      .py_node(6, 0, 1, 12)
      .py_node(7, 6, 2, 400)
      .py_node(8, 7, 3, 9);
  collector::Run parts = run_of(b.bytes());
  collector::StackResolver part_stacks(parts.processes[0], symbols);
  const collector::Attribution& pa = part_stacks.attribute(0, 7);
  REQUIRE(pa.site == "<module> (/work/train.py:12)");
  REQUIRE(pa.frames[0].internal);  // innermost first
  REQUIRE_FALSE(part_stacks.attribute(0, 8).frames[0].internal);
}

TEST_CASE("an AllocStack applies only to the allocation record right after it") {
  TraceBuilder b = traced();
  b.alloc_stack(3).free(0xa).alloc(0xc, 4 * MiB);  // a stray AllocStack before a Free
  b.alloc_stack(2).failed(64 * MiB).meminfo(1 * MiB, 1024 * MiB).alloc(0xd, 1 * MiB);
  collector::Run run = run_of(b.bytes());
  const collector::ProcessModel& p = run.processes[0];
  REQUIRE(p.live.at(0xc).stack == 0);
  REQUIRE(p.live.at(0xd).stack == 0);
  REQUIRE(p.ooms.size() == 1);
  REQUIRE(p.ooms[0].stack == 2);
  nlohmann::json j = report::to_json(run);
  REQUIRE(j["oom"][0]["site"] == "libfoo.so+0x200");
  REQUIRE(j["oom"][0]["library"] == "libfoo.so");
}

TEST_CASE("a trace tree that points at itself cannot make the collector loop") {
  TraceBuilder b;
  b.context(0, 1024 * MiB)
      .stack_node(1, 1, 0x1000)  // its own parent
      .stack_node(2, 3, 0x2000)  // a parent that comes later
      .alloc_stack(1)
      .alloc(0xa, 1 * MiB)
      .alloc_stack(2)
      .alloc(0xb, 1 * MiB);
  collector::Run run = run_of(b.bytes());
  collector::Symbolizer symbols;
  collector::StackResolver stacks(run.processes[0], symbols);
  REQUIRE(stacks.attribute(1, 0).frames.size() == 1);
  REQUIRE(stacks.attribute(2, 0).frames.size() == 1);
  REQUIRE(stacks.attribute(2, 0).site == "??+0x2000");
}

namespace {
collector::Frame native(const std::string& function, const std::string& module,
                        bool internal = false) {
  collector::Frame f;
  f.function = function;
  f.module = module;
  f.internal = internal;
  collector::classify_frame(&f);
  return f;
}
}  // namespace

TEST_CASE("a frame's class and operator: PyTorch's dispatcher as an H200 run's stacks name it") {
  using collector::FrameClass;
  const std::string lib = "/opt/venv/lib/python3.12/site-packages/torch/lib/";
  struct Want {
    collector::Frame f;
    FrameClass cls;
    const char* op;
  };
  const Want wants[] = {
      {native("at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, "
              "c10::Scalar const&, c10::Scalar const&)",
              lib + "libtorch_cpu.so"),
       FrameClass::kTorchNative, "aten::addmm"},
      {native("at::_ops::convolution::redispatch(c10::DispatchKeySet, at::Tensor const&, "
              "at::Tensor const&, std::optional<at::Tensor> const&)",
              lib + "libtorch_cpu.so"),
       FrameClass::kTorchNative, "aten::convolution"},
      {native("torch::autograd::THPVariable_conv2d(_object*, _object*, _object*)",
              lib + "libtorch_python.so"),
       FrameClass::kTorchNative, "aten::conv2d"},
      {native("at::native::cudnn_convolution(at::Tensor const&, at::Tensor const&, "
              "c10::ArrayRef<long>)",
              lib + "libtorch_cuda.so"),
       FrameClass::kTorchNative, ""},
      // A PyTorch function outside its libraries (a static build), and its libraries unsymbolized.
      {native("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)", "/opt/app/app"),
       FrameClass::kTorchNative, "aten::empty_memory_format"},
      {native("", lib + "libc10_cuda.so"), FrameClass::kTorchNative, ""},
      {native("", "/opt/lib/libtorch-2a9b.so.1"), FrameClass::kTorchNative, ""},
      {native("", lib + "libtorch_cuda_linalg.so"), FrameClass::kNative, ""},
      // CPython and the C runtime's start-up.
      {native("_PyEval_EvalFrameDefault", "/usr/bin/python3.12"), FrameClass::kInterpreter, ""},
      {native("", "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"), FrameClass::kInterpreter, ""},
      {native("slot_tp_call", "/opt/conda/lib/libfoo.so"), FrameClass::kInterpreter, ""},
      {native("PyObject_Call", ""), FrameClass::kInterpreter, ""},
      {native("__libc_start_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"), FrameClass::kInterpreter,
       ""},
      {native("clone3", "/usr/lib/x86_64-linux-gnu/libc.so.6"), FrameClass::kInterpreter, ""},
      {native("Pyramid::build()", "/opt/app/app"), FrameClass::kNative, ""},
      {native("main", "/opt/solver/bin/solver"), FrameClass::kNative, ""},
      {native("cudaMalloc", "/usr/local/cuda/lib64/libcudart.so.13", true), FrameClass::kInternal,
       ""},
  };
  for (const Want& w : wants) {
    INFO(w.f.function << " in " << w.f.module);
    CHECK(collector::frame_class_name(w.f.cls) == std::string(collector::frame_class_name(w.cls)));
    CHECK(w.f.op == w.op);
  }
}

TEST_CASE("each frame of a real run's report has its class: an H200 ResNet-50 that died") {
  const std::string dir = std::string(VT_TEST_DATA) + "/h200/first-step/resnet50-b256/";
  collector::Run run = collector::model_of(
      std::vector<std::string>{dir + "vramtrace.744.vtrace", dir + "vramtrace.744.torch"});
  const nlohmann::json j = report::to_json(collector::analysis_of(run));
  // The distinct frames of every stack of the report, by class, and by what they are.
  std::map<std::string, std::set<std::string>> by_class;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& n) {
    if (n.is_array())
      for (const auto& e : n) walk(e);
    if (!n.is_object()) return;
    for (const auto& [key, value] : n.items()) {
      if (key == "stack" && value.is_array())
        for (const auto& f : value) {
          REQUIRE(f.contains("class"));
          REQUIRE_FALSE(f.contains("operator"));  // no symbols here: no function names
          std::string where = f.value("python", false) ? f["file"].get<std::string>() + ":" +
                                                             f["function"].get<std::string>()
                                                       : f["module"].get<std::string>();
          by_class[f["class"].get<std::string>()].insert(where.substr(where.rfind('/') + 1));
        }
      else
        walk(value);
    }
  };
  walk(j);
  const std::map<std::string, std::set<std::string>> want = {
      {"internal",
       {"libcuda.so.1", "libcudart.so.13", "libcupti.so.13", "libvramtrace.so",
        "sitecustomize.py:move", "sitecustomize.py:traced_call"}},
      {"interpreter", {"python3.12"}},
      // nn.Module's call machinery; module.py's other functions (cuda, _apply) are Python frames.
      {"module_call", {"module.py:_call_impl", "module.py:_wrapped_call_impl", "module.py:inner"}},
      {"native", {"libc.so.6", "libcudnn.so.9", "libcudnn_graph.so.9"}},
      {"python",
       {"_jit_internal.py:fn", "batchnorm.py:forward", "container.py:forward",
        "conv.py:_conv_forward", "conv.py:forward", "first_step_job.py:<module>",
        "first_step_job.py:build", "first_step_job.py:main", "first_step_job.py:step",
        "functional.py:_max_pool2d", "functional.py:batch_norm", "module.py:<lambda>",
        "module.py:_apply", "module.py:cuda", "pooling.py:forward", "resnet.py:_forward_impl",
        "resnet.py:forward"}},
      {"torch_native",
       {"libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so"}},
  };
  CHECK(by_class == want);
}

// The collector's copy of the one declared list (made at build time from the start-up hook's
// _vramtrace_frames.py) answers as the hook's rule does (tests/hook/frame_rules_test.py reads
// the same cases): a framework's file is never a site; the program's and vramtrace's own files
// are not frameworks' (the hook's are internal frames, tested above). A C++ source is a
// framework's too, for the collector only: the Python side never sees one.
TEST_CASE("whose line a frame is: the collector's copy of the declared list") {
  std::ifstream in(std::string(VT_TEST_DATA) + "/frame_rules_cases.txt");
  REQUIRE(in);
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    const std::string whose = line.substr(0, tab), path = line.substr(tab + 1);
    INFO(path);
    CHECK(collector::is_framework_file(path) == (whose == "framework"));
    ++cases;
  }
  CHECK(cases == 19);
  CHECK(collector::is_framework_file("/work/csrc/kernels.cu"));
  CHECK(collector::is_framework_file("??"));
}

// From a process's trace tree to readable stacks: symbols, the caller and the owning library.
//
// Native return addresses are symbolized here, in the collector, never in the target: with
// elfutils libdw (linked statically into bin/vramtrace), one Dwfl per module file, cached, and
// used only when the file's build-id matches the one the target recorded. Python frames stand in
// for the interpreter's own _PyEval_EvalFrameDefault frames.
//
// The "site" of an allocation is the innermost Python frame of the program's own code (not of
// an installed package or PyTorch; theirs only when no frame is the program's), else the first
// native frame outside the CUDA runtime and driver, CUPTI and vramtrace (and outside the
// toolkit's inline wrappers such as the cudaMalloc<T> template of cuda_runtime.h). Its "library"
// is the module of the first native frame outside those libraries: who holds the memory, even
// without symbols.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collector/model/model.h"

namespace vramtrace::collector {

// What a frame is, for every view of a stack (report.json's frame "class"; the page folds by
// it): decided once here by classify_frame(), in this order.
enum class FrameClass : uint8_t {
  kInternal,     // CUDA runtime, driver, CUPTI or vramtrace itself (`internal`)
  kInterpreter,  // CPython's native frames (the eval loop, call machinery, the python binary,
                 // libpython) and the C runtime's start-up frames: they say nothing of who holds
                 // memory
  kModuleCall,   // nn.Module's call machinery (torch/nn/modules/module.py's _call_impl,
                 // _wrapped_call_impl, inner, __call__): between a module's caller and its forward
  kPython,       // any other Python frame
  kTorchNative,  // PyTorch's native code (libtorch*, libc10*, or an at::, c10::, torch::,
                 // caffe2:: function): its dispatcher, kernels and caching allocator
  kNative,       // any other native frame (a library's, the program's)
};
// "internal", "interpreter", "module_call", "python", "torch_native", "native".
const char* frame_class_name(FrameClass c);

struct Frame {
  std::string function;  // demangled; empty when unknown
  std::string file;
  uint32_t line = 0;
  std::string module;   // path of the module (empty for Python frames)
  uint64_t offset = 0;  // return address relative to the module's load bias
  bool python = false;
  bool internal = false;                 // inside CUDA, CUPTI or vramtrace: not the caller
  FrameClass cls = FrameClass::kNative;  // set by classify_frame()
  std::string op;  // the PyTorch operator the frame calls ("aten::addmm"); "" for none
};

// A frame's class, from its other fields.
FrameClass frame_class(const Frame& f);
// The operator a PyTorch native frame calls: at::_ops::X::call or ::redispatch, or the Python
// binding torch::autograd::THPVariable_X, as "aten::X"; "" for any other frame.
std::string frame_operator(const Frame& f);
// Sets `cls` and `op` from the frame's other fields.
void classify_frame(Frame* f);

struct Attribution {
  std::vector<Frame> frames;  // leaf first
  std::string site;           // "" when the allocation has no stack
  std::string library;        // basename of the owning module; "" when unknown
  std::string site_file;      // the site frame's file and line, for grouping by line
  uint32_t site_line = 0;
};

// Resolves symbols of module files (cached per path; thread-compatible, not thread-safe).
class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;
  // `address` is relative to the module's load bias (a file virtual address).
  void resolve(const ModuleInfo& m, uint64_t address, Frame* f);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether a module is part of the CUDA stack or of vramtrace itself (by file name).
bool is_internal_module(const std::string& path);
// A frame's file that is not the program's own: an installed package's, PyTorch's Python files,
// Python's frozen modules, or a C++ source (a PyTorch memory snapshot recorded with
// stacks="all" gives its C++ frames among the Python ones: "??" or a .cpp/.h path). The rule
// of a site: the innermost frame whose file is none of these.
bool is_framework_file(const std::string& file);
// A frame's file that is not Python source (no ".py", not "<stdin>" and the like): a C++ frame
// of PyTorch's CapturedTraceback.
bool is_native_source_file(const std::string& file);

// Stacks of one process, resolved once per distinct (native leaf, Python leaf).
class StackResolver {
 public:
  StackResolver(const ProcessModel& p, Symbolizer& symbols) : p_(p), symbols_(symbols) {}
  const Attribution& attribute(uint32_t native_leaf, uint32_t py_leaf);
  const ProcessModel& process() const { return p_; }
  // The driver allocation of the segment PyTorch's allocator made for `block` (one of its
  // blocks): the latest at the block's address made before it (or up to a millisecond after:
  // PyTorch's trace keeps microseconds of the realtime clock), when the block is the first the
  // allocator put there since; its stack holds the call that made the block. Among the
  // allocations the model keeps (live at the end, at each device's peak, at each OOM); null
  // when none, when the block went into a segment made before it, or when the segment is
  // older than what PyTorch's ring still holds.
  const Allocation* segment_made_for(const Allocation& block);

 private:
  const Frame& native_frame(uint32_t node);
  const ProcessModel& p_;
  Symbolizer& symbols_;
  std::map<std::pair<uint32_t, uint32_t>, Attribution> cache_;
  std::map<uint32_t, Frame> frames_;
  bool segments_indexed_ = false;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<const Allocation*>> segments_;
};

// "allocate_weights (/src/callchain.cu:12)", "libfoo.so+0x1234", "run (train.py:40)".
std::string frame_text(const Frame& f);

}  // namespace vramtrace::collector

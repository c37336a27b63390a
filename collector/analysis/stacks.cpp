// Symbolization (elfutils libdw) and attribution of stacks (see stacks.h).
#include "collector/analysis/stacks.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "collector/model/torch_memory.h"
#include "frame_rules.h"  // generated from python/vramtrace/_hook/_vramtrace_frames.py

namespace vramtrace::collector {

namespace {

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

std::string demangle_symbol(const char* name) {
  if (!name) return {};
  if (std::strncmp(name, "_Z", 2) != 0) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

// The CUDA runtime's and driver's entry points, and the toolkit's inline wrappers around them.
bool is_internal_function(const Frame& f) {
  const std::string& n = f.function;
  auto upper_after = [&](size_t i) { return n.size() > i && n[i] >= 'A' && n[i] <= 'Z'; };
  if ((starts_with(n, "cuda") && upper_after(4)) || (starts_with(n, "cu") && upper_after(2)) ||
      starts_with(n, "__cudart") || starts_with(n, "cudart::") ||
      // The static CUDA runtime linked into an executable names its local functions so.
      starts_with(n, "libcudart_static_"))
    return true;
  std::string file = basename_of(f.file);
  return file == "cuda_runtime.h" || file == "cuda_runtime_api.h" ||
         f.file.find("/targets/x86_64-linux/include/") != std::string::npos ||
         f.file.find("/cuda/include/") != std::string::npos;
}

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_letter_or_underscore(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool digits_and_dots(const std::string& s, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i)
    if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) return false;
  return true;
}

// The python binary (python, python3, python3.12) or libpython (libpython3.12.so.1.0).
bool is_interpreter_module(const std::string& path) {
  const std::string b = basename_of(path);
  if (starts_with(b, "libpython")) {
    size_t so = b.find(".so", 9);
    return so != std::string::npos && digits_and_dots(b, 9, so) &&
           digits_and_dots(b, so + 3, b.size());
  }
  return starts_with(b, "python") && digits_and_dots(b, 6, b.size());
}

// CPython's API and call machinery (Py*, _Py*, their slots and vectorcalls) and the C runtime's
// start-up and thread entry frames.
bool is_interpreter_function(const std::string& n) {
  size_t py = starts_with(n, "_Py") ? 1 : 0;
  if (n.compare(py, 2, "Py") == 0) {
    size_t i = py + 2;
    if (i < n.size() && n[i] >= 'A' && n[i] <= 'Z') return true;
    for (; i < n.size() && is_letter_or_underscore(n[i]); ++i)
      if (n[i] == '_') return true;
  }
  for (const char* p : {"method_vectorcall", "cfunction_", "slot_tp_", "vectorcall_", "builtin_",
                        "pymain_", "__libc_start", "_dl_start", "__clone"})
    if (starts_with(n, p)) return true;
  return n == "_start" || n == "start_thread" || n == "clone" || n == "clone3";
}

// PyTorch's native libraries: libtorch, libtorch_cpu, libtorch_cuda, libtorch_python, libc10,
// libc10_cuda (a ".so" right after the name, or after a "-" suffix in the same file name).
bool is_torch_module(const std::string& path) {
  // Each file or folder name of the path, as it starts.
  for (size_t at = 0;;) {
    const size_t slash = std::min(path.find('/', at), path.size());
    if (path.compare(at, 3, "lib") == 0) {
      for (const char* name :
           {"torch", "torch_cpu", "torch_cuda", "torch_python", "c10", "c10_cuda"}) {
        const size_t len = std::strlen(name), end = at + 3 + len;
        if (path.compare(at + 3, len, name) != 0) continue;
        if (path.compare(end, 3, ".so") == 0) return true;
        if (end < path.size() && path[end] == '-') {
          const size_t so = path.find(".so", end + 1);
          if (so != std::string::npos && so + 3 <= slash) return true;
        }
      }
    }
    if (slash >= path.size()) return false;
    at = slash + 1;
  }
}

bool is_module_call(const Frame& f) {
  static const std::string kModulePy = "torch/nn/modules/module.py";
  const std::string& file = f.file;
  const bool in_module_py =
      file.size() >= kModulePy.size() &&
      file.compare(file.size() - kModulePy.size(), kModulePy.size(), kModulePy) == 0 &&
      (file.size() == kModulePy.size() || file[file.size() - kModulePy.size() - 1] == '/');
  return in_module_py && (f.function == "_wrapped_call_impl" || f.function == "_call_impl" ||
                          f.function == "inner" || f.function == "__call__");
}

}  // namespace

const char* frame_class_name(FrameClass c) {
  switch (c) {
    case FrameClass::kInternal: return "internal";
    case FrameClass::kInterpreter: return "interpreter";
    case FrameClass::kModuleCall: return "module_call";
    case FrameClass::kPython: return "python";
    case FrameClass::kTorchNative: return "torch_native";
    case FrameClass::kNative: return "native";
  }
  return "native";
}

FrameClass frame_class(const Frame& f) {
  if (f.internal) return FrameClass::kInternal;
  if (f.python) return is_module_call(f) ? FrameClass::kModuleCall : FrameClass::kPython;
  if ((!f.module.empty() && is_interpreter_module(f.module)) ||
      (!f.function.empty() && is_interpreter_function(f.function)))
    return FrameClass::kInterpreter;
  if ((!f.module.empty() && is_torch_module(f.module)) ||
      (!f.function.empty() &&
       (starts_with(f.function, "at::") || starts_with(f.function, "c10::") ||
        starts_with(f.function, "torch::") || starts_with(f.function, "caffe2::"))))
    return FrameClass::kTorchNative;
  return FrameClass::kNative;
}

std::string frame_operator(const Frame& f) {
  if (f.python) return {};
  const std::string& n = f.function;
  auto ident_end = [&](size_t i) {
    while (i < n.size() && is_ident_char(n[i])) ++i;
    return i;
  };
  if (starts_with(n, "at::_ops::")) {
    const size_t b = 10, e = ident_end(b);
    if (e > b && (n.compare(e, 7, "::call(") == 0 || n.compare(e, 13, "::redispatch(") == 0))
      return "aten::" + n.substr(b, e - b);
  }
  if (starts_with(n, "torch::autograd::THPVariable_")) {
    const size_t b = 29, e = ident_end(b);
    if (e > b && e < n.size() && n[e] == '(') return "aten::" + n.substr(b, e - b);
  }
  return {};
}

void classify_frame(Frame* f) {
  f->cls = frame_class(*f);
  f->op = f->cls == FrameClass::kTorchNative ? frame_operator(*f) : std::string();
}

bool is_internal_module(const std::string& path) {
  std::string b = basename_of(path);
  return starts_with(b, "libcuda.so") || starts_with(b, "libcudart.so") ||
         starts_with(b, "libcupti.so") || starts_with(b, "libvramtrace.so") ||
         starts_with(b, "libnvidia-") || starts_with(b, "libcudadebugger.so");
}

std::string frame_text(const Frame& f) {
  if (!f.function.empty()) {
    if (f.file.empty()) return f.function;
    return f.function + " (" + f.file + ":" + std::to_string(f.line) + ")";
  }
  char off[24];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(f.offset));
  return (f.module.empty() ? std::string("??") : basename_of(f.module)) + off;
}

// ---- libdw --------------------------------------------------------------------------------

struct Symbolizer::Impl {
  struct ModuleDebug {
    Dwfl* dwfl = nullptr;
    Dwfl_Module* mod = nullptr;
  };
  std::unordered_map<std::string, ModuleDebug> files;  // path + build-id -> its Dwfl
  char* debuginfo_path = nullptr;
  Dwfl_Callbacks callbacks{};

  Impl() {
    callbacks.find_elf = dwfl_build_id_find_elf;
    callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    callbacks.section_address = dwfl_offline_section_address;
    callbacks.debuginfo_path = &debuginfo_path;
  }
  ~Impl() {
    for (auto& [k, m] : files)
      if (m.dwfl) dwfl_end(m.dwfl);
  }

  Dwfl_Module* module(const ModuleInfo& m) {
    auto [it, inserted] = files.try_emplace(m.path + '\0' + m.build_id);
    if (!inserted) return it->second.mod;
    ModuleDebug& d = it->second;
    if (m.path.empty() || m.path[0] != '/') return nullptr;  // [vdso] and the like
    d.dwfl = dwfl_begin(&callbacks);
    if (!d.dwfl) return nullptr;
    dwfl_report_begin(d.dwfl);
    // Reported at bias 0: addresses are the file's own virtual addresses.
    d.mod = dwfl_report_elf(d.dwfl, basename_of(m.path).c_str(), m.path.c_str(), -1, 0, false);
    dwfl_report_end(d.dwfl, nullptr, nullptr);
    if (d.mod && !m.build_id.empty()) {
      const unsigned char* bits = nullptr;
      GElf_Addr vaddr = 0;
      int n = dwfl_module_build_id(d.mod, &bits, &vaddr);
      // Another build of the file than the one that ran: its symbols would lie.
      if (n != static_cast<int>(m.build_id.size()) ||
          std::memcmp(bits, m.build_id.data(), m.build_id.size()) != 0)
        d.mod = nullptr;
    }
    return d.mod;
  }
};

Symbolizer::Symbolizer() : impl_(std::make_unique<Impl>()) {}
Symbolizer::~Symbolizer() = default;

void Symbolizer::resolve(const ModuleInfo& m, uint64_t address, Frame* f) {
  Dwfl_Module* mod = impl_->module(m);
  if (!mod) return;
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* name = dwfl_module_addrinfo(mod, address, &off, &sym, nullptr, nullptr, nullptr);
  if (name) f->function = demangle_symbol(name);
  if (Dwfl_Line* line = dwfl_module_getsrc(mod, address)) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
    if (file) {
      f->file = file;
      f->line = lineno > 0 ? static_cast<uint32_t>(lineno) : 0;
    }
  }
}

// ---- attribution --------------------------------------------------------------------------

const Frame& StackResolver::native_frame(uint32_t id) {
  auto [it, inserted] = frames_.try_emplace(id);
  if (!inserted) return it->second;
  Frame& f = it->second;
  auto n = p_.stack_nodes.find(id);
  if (n == p_.stack_nodes.end()) return f;
  const StackNode& node = n->second;
  if (node.module >= 0) {
    const ModuleInfo& m = p_.modules[static_cast<size_t>(node.module)];
    f.module = m.path;
    f.offset = node.ip - m.bias;
    // A return address: the call is the instruction before it.
    symbols_.resolve(m, f.offset ? f.offset - 1 : 0, &f);
    f.internal = is_internal_module(m.path);
  } else {
    f.offset = node.ip;
  }
  if (!f.internal) f.internal = is_internal_function(f);
  classify_frame(&f);
  return f;
}

bool is_native_source_file(const std::string& file) {
  if (file.empty() || file[0] == '<') return false;
  return file.size() < 3 || file.compare(file.size() - 3, 3, ".py") != 0;
}

// An entry of the declared list of whose line a frame is (frame_rules.h, made from the start-up
// hook's _vramtrace_frames.py): the same rule as the hook's and the pytest plugin's.
static bool matches(const frame_rules::Entry& e, const std::string& file, const std::string& name) {
  const std::string_view kind = e.kind, text = e.text;
  if (kind == "part") return file.find(text) != std::string::npos;
  if (kind == "start") return file.rfind(text, 0) == 0;
  if (kind == "name") return name == text;
  return name.rfind(text, 0) == 0 && name.size() > 3 &&  // "prefix": a .py so named
         name.compare(name.size() - 3, 3, ".py") == 0;
}

bool is_framework_file(const std::string& file) {
  // A frame with no file (a C++ frame of a memory snapshot without its source) is nobody's line.
  if (file.empty() || is_native_source_file(file)) return true;
  const std::string name = basename_of(file);
  for (const auto& e : frame_rules::kFrameworkFiles)
    if (matches(e, file, name)) return true;
  return false;
}

// vramtrace's own start-up hook (the launcher writes it as sitecustomize.py, with its parts
// _vramtrace_*.py beside it, in a folder of its own): its wrappers of Module.__call__ and
// Tensor.to and its module hooks run inside the program's calls, so they sit between the
// program's line and PyTorch's frames in every stack. Its frames are internal, kept in the
// stack, never the site.
static bool is_startup_hook_file(const std::string& file) {
  const std::string name = basename_of(file);
  for (const auto& e : frame_rules::kVramtraceFiles)
    if (matches(e, file, name)) return true;
  return false;
}

const Attribution& StackResolver::attribute(uint32_t native_leaf, uint32_t py_leaf) {
  auto key = std::make_pair(native_leaf, py_leaf);
  auto [it, inserted] = cache_.try_emplace(key);
  Attribution& a = it->second;
  if (!inserted) return a;

  std::vector<Frame> py;
  // Bounded walks: a corrupt trace cannot loop forever (ids only grow towards the leaf).
  for (uint32_t id = py_leaf; id && py.size() < 4096;) {
    auto n = p_.stack_nodes.find(id);
    if (n == p_.stack_nodes.end() || !n->second.python) break;
    Frame f;
    f.python = true;
    auto code = p_.py_codes.find(n->second.code);
    if (code != p_.py_codes.end()) {
      f.file = code->second.first;
      f.function = code->second.second;
    }
    f.line = n->second.line;
    f.internal = is_startup_hook_file(f.file);
    classify_frame(&f);
    py.push_back(std::move(f));
    if (n->second.parent >= id) break;
    id = n->second.parent;
  }
  bool py_placed = false;
  for (uint32_t id = native_leaf; id && a.frames.size() < 4096;) {
    auto n = p_.stack_nodes.find(id);
    if (n == p_.stack_nodes.end() || n->second.python) break;
    const Frame& f = native_frame(id);
    if (f.function == "_PyEval_EvalFrameDefault" && !py.empty()) {
      if (!py_placed) a.frames.insert(a.frames.end(), py.begin(), py.end());
      py_placed = true;
    } else {
      a.frames.push_back(f);
    }
    if (n->second.parent >= id) break;
    id = n->second.parent;
  }
  if (!py_placed) a.frames.insert(a.frames.end(), py.begin(), py.end());

  // The innermost Python frame of the program's own code; a framework's (PyTorch's modules,
  // installed packages) only when no frame is the program's.
  const Frame* site = nullptr;
  for (const Frame& f : a.frames)
    if (f.python && !f.internal && !is_framework_file(f.file)) {
      site = &f;
      break;
    }
  // Then a framework's Python frame before PyTorch's C++ frames (a memory snapshot's stacks="all"
  // puts the allocator's own functions innermost).
  for (const Frame& f : a.frames)
    if (!site && f.python && !f.internal && !is_native_source_file(f.file)) {
      site = &f;
      break;
    }
  for (const Frame& f : a.frames)
    if (!site && f.python && !f.internal) {
      site = &f;
      break;
    }
  for (const Frame& f : a.frames) {
    if (f.python) continue;
    if (!site && !f.internal) site = &f;
    if (a.library.empty() && !f.module.empty() && !is_internal_module(f.module))
      a.library = basename_of(f.module);
  }
  if (site) {
    a.site = frame_text(*site);
    a.site_file = site->file;
    a.site_line = site->line;
  }
  return a;
}

const Allocation* StackResolver::segment_made_for(const Allocation& block) {
  constexpr uint64_t kSkew = 1000000;
  const TorchMemory* tm = p_.torch_memory.get();
  if (!tm) return nullptr;
  if (!segments_indexed_) {
    segments_indexed_ = true;
    auto add = [&](const Allocation& a) {
      if (a.space == 0) segments_[{a.device, a.id}].push_back(&a);
    };
    for (const auto& [key, a] : p_.live) add(a);
    for (const auto& [index, d] : p_.devices)
      for (const Allocation& a : d.live_at_peak) add(a);
    for (const OomEvent& o : p_.ooms) {
      for (const Allocation& a : o.live) add(a);
      for (const Allocation& a : o.survivors) add(a);
    }
  }
  auto it = segments_.find({block.device, block.id});
  if (it == segments_.end()) return nullptr;
  const Allocation* latest = nullptr;
  for (const Allocation* a : it->second)
    if (a->time_ns <= block.time_ns + kSkew && (!latest || a->time_ns > latest->time_ns))
      latest = a;
  if (!latest) return nullptr;
  // A segment made before the window of a ring that dropped its earliest entries: which block
  // the allocator put there first is not known.
  const auto window = tm->context().window_start.find(block.device);
  if (window != tm->context().window_start.end() && latest->time_ns < window->second)
    return nullptr;
  const uint64_t first = tm->first_block_at(block.device, block.id,
                                            latest->time_ns - std::min(latest->time_ns, kSkew));
  if (first == UINT64_MAX) return nullptr;
  const uint64_t gap = first > block.time_ns ? first - block.time_ns : block.time_ns - first;
  return gap <= 2000 ? latest : nullptr;  // the model's and the trace's times of one block
}

}  // namespace vramtrace::collector

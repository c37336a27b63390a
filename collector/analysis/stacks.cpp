// Symbolization (elfutils libdw) and attribution of stacks (see stacks.h).
#include "collector/analysis/stacks.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "collector/model/torch_memory.h"

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

}  // namespace

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
  return f;
}

bool is_native_source_file(const std::string& file) {
  if (file.empty() || file[0] == '<') return false;
  return file.size() < 3 || file.compare(file.size() - 3, 3, ".py") != 0;
}

bool is_framework_file(const std::string& file) {
  // A frame with no file (a C++ frame of a memory snapshot without its source) is nobody's line.
  return file.empty() || file.find("/site-packages/") != std::string::npos ||
         file.find("/dist-packages/") != std::string::npos ||
         file.find("/torch/") != std::string::npos || file.rfind("<frozen ", 0) == 0 ||
         is_native_source_file(file);
}

// vramtrace's own start-up hook (the launcher writes it as sitecustomize.py, with its parts
// _vramtrace_*.py beside it, in a folder of its own): its wrappers of Module.__call__ and
// Tensor.to and its module hooks run inside the program's calls, so they sit between the
// program's line and PyTorch's frames in every stack. A sitecustomize.py or a _vramtrace_*.py
// is never a program's training code: its frames are internal, kept in the stack, never the
// site.
static bool is_startup_hook_file(const std::string& file) {
  const std::string name = basename_of(file);
  return name == "sitecustomize.py" || (name.rfind("_vramtrace_", 0) == 0 && name.size() > 3 &&
                                        name.compare(name.size() - 3, 3, ".py") == 0);
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

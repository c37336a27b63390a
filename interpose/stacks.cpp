// Native and Python stacks at each allocation, interned in the target as a trace tree.
//
// Unwinding: libgcc's _Unwind_Backtrace, linked statically and hidden (-static-libgcc,
// --exclude-libs). Debian's libunwind.a is not position-independent (R_X86_64_32 relocations in
// .text), so it cannot go into a shared object, and linking libunwind.so.8 would make the target
// load a library it may also carry itself (and that the GPU hosts may lack). libgcc's unwinder
// reads the same .eh_frame tables through dl_iterate_phdr and needs no allocation.
//
// The trace tree (heaptrack's habit): a node is (frame, parent); each new node is written once as
// a StackNode (native return address) or PyStackNode (Python code id + line) record, and an
// allocation names only its leaf ids in an AllocStack record. The intern tables (intern.h) live
// in mmap'd memory and are only touched under the recorder's lock. Once a table is 3/4 full,
// every node is written again under a fresh id: the trace grows, the answer stays right.
//
// Module map: dl_iterate_phdr's adds/subs counters are compared at every capture (one call that
// stops at the first module); after a dlopen or dlclose the whole map is sent again, before any
// node that may point into the new module.
//
// Python frames: on CPython 3.10 to 3.13 (Py_GetVersion, once) the direct reader walks the
// calling thread's frames from its PyThreadState (PyGILState_GetThisThreadState: a TSS read),
// GIL held or not, with per-version struct offsets hardcoded below. On any other version, and
// only when the thread holds the GIL, CPython's own C API walks them (stable-ABI functions); the
// pending exception, if any, is saved and restored around that walk.
#include "interpose/stacks.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>

#include "common/format.h"
#include "interpose/intern.h"
#include "interpose/options.h"
#include "interpose/recorder.h"

namespace vramtrace::interpose {
namespace {

namespace rec = format::rec;

bool g_native = false;
bool g_python = false;
int g_max_depth = 64;
constexpr uint32_t kMaxStringBytes = 1024;

// ---- intern tables (guarded by the recorder's lock) ---------------------------------------

// A trace-tree node: (frame, parent). Native and Python nodes share one table and one id space.
struct NodeSlot {
  uint64_t value;  // return address, or the code hash of a Python frame
  uint64_t extra;  // 0 for native frames; line | 1 << 63 for Python frames
  uint32_t parent;
  uint32_t id;
  bool same_key(const NodeSlot& o) const {
    return value == o.value && extra == o.extra && parent == o.parent;
  }
};
uint64_t node_hash(const NodeSlot& n) { return hash::mix(n.value ^ hash::mix(n.extra + n.parent)); }
// 12 MiB of address space, touched as used.
InternTable<NodeSlot, node_hash, 1u << 19, InternStorage::kMapped, InternFull::kThreeQuarters>
    g_nodes;
uint32_t g_next_node = 1;

// A Python code object, by the hash of its file and function name.
struct CodeSlot {
  uint64_t hash;
  uint32_t id;
  bool same_key(const CodeSlot& o) const { return hash == o.hash; }
};
uint64_t code_slot_hash(const CodeSlot& c) { return hash::mix(c.hash); }
InternTable<CodeSlot, code_slot_hash, 1u << 16, InternStorage::kMapped, InternFull::kThreeQuarters>
    g_codes;
uint32_t g_next_code = 1;

Interned intern_node(uint64_t value, uint64_t extra, uint32_t parent) {
  return g_nodes.intern(NodeSlot{value, extra, parent, 0}, [] { return g_next_node++; });
}

Interned intern_code(uint64_t hash) {
  return g_codes.intern(CodeSlot{hash, 0}, [] { return g_next_code++; });
}

// ---- module map ---------------------------------------------------------------------------

pthread_mutex_t g_module_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<uint64_t> g_seen_adds{~0ull}, g_seen_subs{~0ull};
uint64_t g_generation = 0;
char g_exe[4096];
size_t g_exe_len = 0;

struct Counters {
  uint64_t adds = 0, subs = 0;
};

int peek_counters(dl_phdr_info* info, size_t size, void* data) {
  auto* c = static_cast<Counters*>(data);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
  }
  return 1;  // the counters are the same in every entry: stop at the first
}

size_t build_id(const dl_phdr_info* info, const uint8_t** out) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof *n;
      const uint8_t* desc = name + ((n->n_namesz + 3) & ~3u);
      if (desc + n->n_descsz > end) break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *out = desc;
        return n->n_descsz;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

int write_module(dl_phdr_info* info, size_t, void*) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uint64_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (hi == 0) return 0;
  const char* path = info->dlpi_name;
  size_t path_len = path ? strnlen(path, 4096) : 0;
  if (path_len == 0) {  // the main program
    path = g_exe;
    path_len = g_exe_len;
  }
  const uint8_t* id = nullptr;
  size_t id_len = build_id(info, &id);
  if (id_len > 64) id_len = 0;
  RecordSlot slot(format::max_fixed_bytes<rec::Module>() + path_len + id_len);
  if (!slot.ok()) return 0;
  slot.commit(format::put(slot.begin(), rec::Module{g_generation,
                                                    info->dlpi_addr,
                                                    lo,
                                                    hi,
                                                    {path, path_len},
                                                    {reinterpret_cast<const char*>(id), id_len}}));
  return 0;
}

// ---- Python -------------------------------------------------------------------------------

struct PyApi {
  int (*is_initialized)() = nullptr;
  int (*gil_check)() = nullptr;
  void* (*this_thread_state)() = nullptr;
  void* (*thread_state_get_frame)(void*) = nullptr;  // new reference
  void* (*frame_get_back)(void*) = nullptr;          // new reference
  void* (*frame_get_code)(void*) = nullptr;          // new reference
  int (*frame_get_line)(void*) = nullptr;
  void* (*get_attr)(void*, void*) = nullptr;  // new reference
  const char* (*as_utf8)(void*, ssize_t*) = nullptr;
  void (*dec_ref)(void*) = nullptr;
  void* (*intern)(const char*) = nullptr;
  void (*err_fetch)(void**, void**, void**) = nullptr;
  void (*err_restore)(void*, void*, void*) = nullptr;
  void* co_filename = nullptr;
  void* co_name = nullptr;
  // The direct reader (no GIL needed).
  const char* (*get_version)() = nullptr;
  int (*addr2line)(void*, int) = nullptr;
  void* code_type = nullptr;
};

// Struct offsets of each CPython version, from probes compiled against its internal headers
// (Py_BUILD_CORE + internal/pycore_frame.h) on x86-64 Linux. Layout per version:
//   3.10: tstate->frame (PyFrameObject*): f_back, f_code, f_lasti (int, in code units)
//   3.11/3.12: tstate->cframe->current_frame (_PyInterpreterFrame*): f_code, previous, prev_instr
//   3.13: tstate->current_frame: f_executable, previous, instr_ptr
struct PyLayout {
  int minor;
  uint32_t ts_frame;   // 3.10: frame; 3.11/12: cframe; 3.13: current_frame
  int32_t cf_current;  // offset of current_frame in _PyCFrame, -1 when no cframe
  uint32_t fr_code, fr_previous, fr_instr;
  int32_t fr_owner;  // -1: no owner field
  bool lasti_int;    // 3.10: int f_lasti; else an instruction pointer
  uint32_t co_filename, co_name, co_firstlineno;
  uint32_t co_code;  // co_code_adaptive (3.11+)
  uint32_t str_state, str_ascii_data, str_utf8_len, str_utf8;
};
constexpr PyLayout kLayouts[] = {
    {10, 24, -1, 32, 24, 96, -1, true, 104, 112, 40, 0, 32, 48, 48, 56},
    {11, 56, 8, 32, 48, 56, 69, false, 112, 120, 72, 184, 32, 48, 48, 56},
    {12, 56, 0, 0, 8, 56, 70, false, 112, 120, 68, 192, 32, 40, 40, 48},
    {13, 72, -1, 0, 8, 56, 70, false, 112, 120, 68, 200, 32, 40, 40, 48},
};
constexpr int kFrameOwnedByCStack = 3;  // 3.12 and 3.13
const PyLayout* g_layout = nullptr;
PyApi g_py;
std::atomic<bool> g_py_ready{false};

template <typename F>
bool find(F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return fn != nullptr;
}

// Under g_module_lock, after the module map changed: is there a CPython in this process now?
void resolve_python() {
  if (!g_python || g_py_ready.load()) return;
  PyApi a;
  bool ok = find(a.is_initialized, "Py_IsInitialized") && find(a.gil_check, "PyGILState_Check") &&
            find(a.this_thread_state, "PyGILState_GetThisThreadState") &&
            find(a.thread_state_get_frame, "PyThreadState_GetFrame") &&
            find(a.frame_get_back, "PyFrame_GetBack") &&
            find(a.frame_get_code, "PyFrame_GetCode") &&
            find(a.frame_get_line, "PyFrame_GetLineNumber") &&
            find(a.get_attr, "PyObject_GetAttr") && find(a.as_utf8, "PyUnicode_AsUTF8AndSize") &&
            find(a.dec_ref, "Py_DecRef") && find(a.intern, "PyUnicode_InternFromString") &&
            find(a.err_fetch, "PyErr_Fetch") && find(a.err_restore, "PyErr_Restore");
  if (!ok) return;
  if (find(a.get_version, "Py_GetVersion") && find(a.addr2line, "PyCode_Addr2Line") &&
      (a.code_type = dlsym(RTLD_DEFAULT, "PyCode_Type"))) {
    const char* v = a.get_version();  // "3.12.1 (main, ...": a static string
    if (v && v[0] == '3' && v[1] == '.' && v[2] == '1' && v[3] >= '0' && v[3] <= '3' &&
        (v[4] < '0' || v[4] > '9'))
      for (const PyLayout& l : kLayouts)
        if (l.minor == 10 + (v[3] - '0')) g_layout = &l;
  }
  g_py = a;  // the attribute names are made at the first walk, with the GIL held
  g_py_ready.store(true);
}

// The file, a 0xff byte (in neither name: UTF-8), then the function.
uint64_t hash_code(const char* file, size_t fl, const char* fn, size_t nl) {
  return hash::fnv1a(hash::fnv1a_word(hash::fnv1a(hash::kFnvOffset, file, fl), 0xff), fn, nl);
}

const char* utf8_attr(void* obj, void* name, uint32_t* len) {
  *len = 0;
  void* v = g_py.get_attr(obj, name);
  if (!v) return nullptr;
  ssize_t n = 0;
  const char* s = g_py.as_utf8(v, &n);
  // The string stays alive: the code object holds it, and the running frame holds the code.
  g_py.dec_ref(v);
  if (!s || n < 0) return nullptr;
  *len = static_cast<uint32_t>(n < static_cast<ssize_t>(kMaxStringBytes) ? n : kMaxStringBytes);
  return s;
}

// ---- direct reader: the calling thread's own frames, read from the interpreter's structs.
// The thread is inside our callback, so its frame stack cannot change under us; other threads
// never free a running frame's code object. Nothing here takes a reference, allocates or needs
// the GIL. Every pointer is checked before it is followed, and a code object must have
// PyCode_Type as its type, so a wrong layout gives no Python frames rather than a crash.

bool plausible(uintptr_t p) { return p >= 4096 && p < (1ull << 47) && (p & 7) == 0; }

template <typename T>
T read_at(uintptr_t base, uint32_t off) {
  T v;
  memcpy(&v, reinterpret_cast<const void*>(base + off), sizeof v);
  return v;
}

// UTF-8 of a str object held by a code object: compact ASCII directly, otherwise its cached
// UTF-8 copy when there is one; nullptr when neither.
const char* read_str(uintptr_t str, uint32_t* len) {
  *len = 0;
  if (!plausible(str)) return nullptr;
  const PyLayout& l = *g_layout;
  int64_t length = read_at<int64_t>(str, 16);  // PyASCIIObject.length, after the object header
  uint32_t state = read_at<uint32_t>(str, l.str_state);
  bool compact = state & (1u << 5),
       ascii = state & (1u << 6);  // interned:2, kind:3, compact, ascii
  if (!compact || length < 0) return nullptr;
  const char* data;
  if (ascii) {
    data = reinterpret_cast<const char*>(str + l.str_ascii_data);
  } else {
    uintptr_t u = read_at<uintptr_t>(str, l.str_utf8);
    length = read_at<int64_t>(str, l.str_utf8_len);
    if (!u || length < 0) return nullptr;
    data = reinterpret_cast<const char*>(u);
  }
  *len = static_cast<uint32_t>(length < kMaxStringBytes ? length : kMaxStringBytes);
  return data;
}

bool add_code_frame(CapturedStack* s, uintptr_t code, int64_t byte_offset) {
  const PyLayout& l = *g_layout;
  if (!plausible(code) || read_at<void*>(code, 8) != g_py.code_type) return false;  // ob_type
  PyFrameRef& f = s->py[s->py_depth];
  f.file = read_str(read_at<uintptr_t>(code, l.co_filename), &f.file_len);
  f.function = read_str(read_at<uintptr_t>(code, l.co_name), &f.function_len);
  if (!f.file) f.file = "?", f.file_len = 1;
  if (!f.function) f.function = "?", f.function_len = 1;
  int line = byte_offset >= 0 && byte_offset < (1ll << 30)
                 ? g_py.addr2line(reinterpret_cast<void*>(code), static_cast<int>(byte_offset))
                 : -1;
  if (line <= 0) line = read_at<int>(code, l.co_firstlineno);
  f.line = line > 0 ? static_cast<uint32_t>(line) : 0;
  f.code_hash = hash_code(f.file, f.file_len, f.function, f.function_len);
  ++s->py_depth;
  return true;
}

void read_python(CapturedStack* s, uintptr_t tstate) {
  const PyLayout& l = *g_layout;
  if (!plausible(tstate)) return;
  uintptr_t frame = read_at<uintptr_t>(tstate, l.ts_frame);
  if (l.cf_current >= 0) frame = plausible(frame) ? read_at<uintptr_t>(frame, l.cf_current) : 0;
  for (int steps = 0; frame && steps < 4096 && s->py_depth < g_max_depth; ++steps) {
    if (!plausible(frame)) return;
    uintptr_t code = read_at<uintptr_t>(frame, l.fr_code);
    uintptr_t previous = read_at<uintptr_t>(frame, l.fr_previous);
    if (l.lasti_int) {  // 3.10: f_lasti counts code units, -1 before the first
      add_code_frame(s, code, static_cast<int64_t>(read_at<int>(frame, l.fr_instr)) * 2);
    } else {
      bool c_stack = l.fr_owner >= 0 && l.minor >= 12 &&
                     read_at<uint8_t>(frame, l.fr_owner) == kFrameOwnedByCStack;
      if (!c_stack && plausible(code)) {
        intptr_t first = static_cast<intptr_t>(code + l.co_code);
        intptr_t instr = static_cast<intptr_t>(read_at<uintptr_t>(frame, l.fr_instr));
        if (instr >= first)  // else incomplete: not started yet
          add_code_frame(s, code, instr - first);
      }
    }
    frame = previous;
  }
}

void capture_python(CapturedStack* s) {
  if (!g_py_ready.load(std::memory_order_acquire)) return;
  if (!g_py.is_initialized()) return;
  void* tstate = g_py.this_thread_state();  // a TSS read: no GIL needed
  if (!tstate) return;                      // a thread Python never ran on
  if (g_layout) {
    read_python(s, reinterpret_cast<uintptr_t>(tstate));
    return;
  }
  if (g_py.gil_check() != 1) return;  // unknown version: the C API, with the GIL held only
  void *et, *ev, *tb;
  g_py.err_fetch(&et, &ev, &tb);
  if (!g_py.co_filename) {
    g_py.co_filename = g_py.intern("co_filename");
    g_py.co_name = g_py.intern("co_name");
  }
  void* frame = g_py.co_filename && g_py.co_name
                    ? g_py.thread_state_get_frame(g_py.this_thread_state())
                    : nullptr;
  while (frame && s->py_depth < g_max_depth) {
    void* code = g_py.frame_get_code(frame);
    if (code) {
      PyFrameRef& f = s->py[s->py_depth];
      f.file = utf8_attr(code, g_py.co_filename, &f.file_len);
      f.function = utf8_attr(code, g_py.co_name, &f.function_len);
      int line = g_py.frame_get_line(frame);
      f.line = line > 0 ? static_cast<uint32_t>(line) : 0;
      g_py.dec_ref(code);
      if (f.file && f.function) {
        f.code_hash = hash_code(f.file, f.file_len, f.function, f.function_len);
        ++s->py_depth;
      }
    }
    void* back = g_py.frame_get_back(frame);
    g_py.dec_ref(frame);
    frame = back;
  }
  if (frame) g_py.dec_ref(frame);
  g_py.err_restore(et, ev, tb);
}

// ---- native -------------------------------------------------------------------------------

struct Walk {
  CapturedStack* s;
  int skip;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* data) {
  auto* w = static_cast<Walk*>(data);
  if (w->skip > 0) {
    --w->skip;
    return _URC_NO_REASON;
  }
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  w->s->ips[w->s->depth++] = ip;
  return w->s->depth >= g_max_depth ? _URC_NORMAL_STOP : _URC_NO_REASON;
}

void check_modules() {
  Counters c;
  dl_iterate_phdr(peek_counters, &c);
  if (c.adds == g_seen_adds.load(std::memory_order_relaxed) &&
      c.subs == g_seen_subs.load(std::memory_order_relaxed))
    return;
  send_module_map();
}

}  // namespace

void send_module_map() {
  if (!g_native && !g_python) return;
  pthread_mutex_lock(&g_module_lock);
  Counters c;
  dl_iterate_phdr(peek_counters, &c);
  if (c.adds != g_seen_adds.load() || c.subs != g_seen_subs.load()) {
    ++g_generation;
    if (g_native) dl_iterate_phdr(write_module, nullptr);
    g_seen_adds.store(c.adds);
    g_seen_subs.store(c.subs);
    resolve_python();
  }
  pthread_mutex_unlock(&g_module_lock);
}

namespace {
bool g_async_all = false;
uint64_t g_async_min_bytes = 64ull << 20;
}  // namespace

bool async_stack_wanted(uint64_t bytes, bool failed) {
  return g_async_all || failed || bytes >= g_async_min_bytes;
}

void stacks_init(const StackOptions& options) {
  g_native = options.native;
  g_python = options.python;
  g_async_all = options.async_all;
  g_async_min_bytes = options.async_min_bytes;
  g_max_depth = options.max_depth;
  if (!g_native && !g_python) return;
  ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
  g_exe_len = n > 0 ? static_cast<size_t>(n) : 0;
  g_nodes.map();
  g_codes.map();
  send_module_map();
}

bool stacks_enabled() { return g_native || g_python; }

void capture_stack(CapturedStack* s) {
  s->depth = s->py_depth = 0;
  if (!g_native && !g_python) return;
  check_modules();
  if (g_native) {
    Walk w{s, 1};  // this function's own frame
    _Unwind_Backtrace(on_frame, &w);
  }
  if (g_python) capture_python(s);
}

size_t stack_record_bytes(const CapturedStack& s) {
  size_t n = format::max_fixed_bytes<rec::AllocStack>();
  n += static_cast<size_t>(s.depth) * format::max_fixed_bytes<rec::StackNode>();
  for (int i = 0; i < s.py_depth; ++i)
    n += format::max_fixed_bytes<rec::PyStackNode>() + format::max_fixed_bytes<rec::PyCode>() +
         s.py[i].file_len + s.py[i].function_len;
  return n;
}

uint8_t* write_stack(uint8_t* p, const CapturedStack& s, uint32_t* records) {
  uint32_t native_leaf = 0, py_leaf = 0;
  for (int i = s.depth - 1; i >= 0; --i) {  // root first: a parent is written before its child
    const Interned node = intern_node(s.ips[i], 0, native_leaf);
    if (node.fresh) {
      p = format::put(p, rec::StackNode{node.id, native_leaf, s.ips[i]});
      ++*records;
    }
    native_leaf = node.id;
  }
  for (int i = s.py_depth - 1; i >= 0; --i) {
    const PyFrameRef& f = s.py[i];
    const Interned code = intern_code(f.code_hash);
    if (code.fresh) {
      p = format::put(p, rec::PyCode{code.id, {f.file, f.file_len}, {f.function, f.function_len}});
      ++*records;
    }
    const Interned node = intern_node(f.code_hash, f.line | (1ull << 63), py_leaf);
    if (node.fresh) {
      p = format::put(p, rec::PyStackNode{node.id, py_leaf, code.id, f.line});
      ++*records;
    }
    py_leaf = node.id;
  }
  p = format::put(p, rec::AllocStack{native_leaf, py_leaf});
  ++*records;
  return p;
}

}  // namespace vramtrace::interpose

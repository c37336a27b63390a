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
// allocation names only its leaf ids in an AllocStack record. The intern tables live in mmap'd
// memory and are only touched under the recorder's lock. When a table is full, new nodes are
// still written (under fresh ids) but no longer remembered: the trace grows, the answer stays
// right.
//
// Module map: dl_iterate_phdr's adds/subs counters are compared at every capture (one call that
// stops at the first module); after a dlopen or dlclose the whole map is sent again, before any
// node that may point into the new module.
//
// Python frames: when the allocating thread holds the GIL, CPython's own C API (found with dlsym,
// stable-ABI functions only, so 3.10 to 3.13 alike) walks its frames. The pending exception, if
// any, is saved and restored around the walk.
#include "interpose/stacks.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>

#include "common/format.h"
#include "interpose/recorder.h"

namespace vramtrace::interpose {
namespace {

using format::RecordType;

bool g_native = false;
bool g_python = false;
int g_max_depth = 64;
constexpr uint32_t kMaxStringBytes = 1024;

// ---- intern tables (guarded by the recorder's lock) ---------------------------------------

struct NodeSlot {
  uint64_t value;  // return address, or the code hash of a Python frame
  uint64_t extra;  // 0 for native frames; line | 1 << 63 for Python frames
  uint32_t parent;
  uint32_t id;     // 0: empty
};
constexpr uint64_t kNodeSlots = 1u << 19;  // 12 MiB of address space, touched as used
NodeSlot* g_nodes = nullptr;
uint64_t g_node_count = 0;
uint32_t g_next_node = 1;

struct CodeSlot {
  uint64_t hash;
  uint32_t id;
};
constexpr uint64_t kCodeSlots = 1u << 16;
CodeSlot* g_codes = nullptr;
uint64_t g_code_count = 0;
uint32_t g_next_code = 1;

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// Returns the node's id; *fresh is true when it must be written (new, or the table is full).
uint32_t intern_node(uint64_t value, uint64_t extra, uint32_t parent, bool* fresh) {
  *fresh = true;
  if (!g_nodes || g_node_count * 4 >= kNodeSlots * 3) return g_next_node++;
  uint64_t h = mix(value ^ mix(extra + parent));
  for (uint64_t i = 0;; ++i) {
    NodeSlot& s = g_nodes[(h + i) & (kNodeSlots - 1)];
    if (s.id == 0) {
      s = NodeSlot{value, extra, parent, g_next_node++};
      ++g_node_count;
      return s.id;
    }
    if (s.value == value && s.extra == extra && s.parent == parent) {
      *fresh = false;
      return s.id;
    }
  }
}

uint32_t intern_code(uint64_t hash, bool* fresh) {
  *fresh = true;
  if (!g_codes || g_code_count * 4 >= kCodeSlots * 3) return g_next_code++;
  for (uint64_t i = 0;; ++i) {
    CodeSlot& s = g_codes[(mix(hash) + i) & (kCodeSlots - 1)];
    if (s.id == 0) {
      s = CodeSlot{hash, g_next_code++};
      ++g_code_count;
      return s.id;
    }
    if (s.hash == hash) {
      *fresh = false;
      return s.id;
    }
  }
}

template <typename T>
T* map_table(uint64_t slots) {
  void* m = mmap(nullptr, slots * sizeof(T), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return m == MAP_FAILED ? nullptr : static_cast<T*>(m);
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
  RecordSlot slot(1 + 4 * 10 + 10 + path_len + 10 + id_len);
  if (!slot.ok()) return 0;
  uint8_t* p = slot.begin();
  p = format::put_u8(p, static_cast<uint8_t>(RecordType::Module));
  p = format::put_varint(p, g_generation);
  p = format::put_varint(p, info->dlpi_addr);
  p = format::put_varint(p, lo);
  p = format::put_varint(p, hi);
  p = format::put_bytes(p, path, path_len);
  p = format::put_bytes(p, id, id_len);
  slot.commit(p);
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
  void* (*get_attr)(void*, void*) = nullptr;         // new reference
  const char* (*as_utf8)(void*, ssize_t*) = nullptr;
  void (*dec_ref)(void*) = nullptr;
  void* (*intern)(const char*) = nullptr;
  void (*err_fetch)(void**, void**, void**) = nullptr;
  void (*err_restore)(void*, void*, void*) = nullptr;
  void* co_filename = nullptr;
  void* co_name = nullptr;
};
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
  g_py = a;  // the attribute names are made at the first walk, with the GIL held
  g_py_ready.store(true);
}

uint64_t hash_code(const char* file, size_t fl, const char* fn, size_t nl) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < fl; ++i) h = (h ^ static_cast<uint8_t>(file[i])) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
  for (size_t i = 0; i < nl; ++i) h = (h ^ static_cast<uint8_t>(fn[i])) * 1099511628211ull;
  return h;
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

void capture_python(CapturedStack* s) {
  if (!g_py_ready.load(std::memory_order_acquire)) return;
  if (!g_py.is_initialized() || !g_py.this_thread_state() || g_py.gil_check() != 1) return;
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

void stacks_init() {
  const char* mode = getenv("VRAMTRACE_STACKS");
  const char* min_async = getenv("VRAMTRACE_ASYNC_STACK_MIN_BYTES");
  if (min_async && *min_async) g_async_min_bytes = strtoull(min_async, nullptr, 10);
  if (!mode || !*mode || strcmp(mode, "auto") == 0) {
    g_native = g_python = true;
  } else if (strcmp(mode, "all") == 0) {
    g_native = g_python = true;
    g_async_all = true;
  } else if (strcmp(mode, "native") == 0) {
    g_native = true;
  } else if (strcmp(mode, "python") == 0) {
    g_python = true;
  }  // "none" and anything unknown: no stacks
  const char* depth = getenv("VRAMTRACE_MAX_DEPTH");
  if (depth && *depth) {
    long d = strtol(depth, nullptr, 10);
    if (d >= 1) g_max_depth = d > kMaxStackDepth ? kMaxStackDepth : static_cast<int>(d);
  }
  if (!g_native && !g_python) return;
  ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
  g_exe_len = n > 0 ? static_cast<size_t>(n) : 0;
  g_nodes = map_table<NodeSlot>(kNodeSlots);
  g_codes = map_table<CodeSlot>(kCodeSlots);
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
  size_t n = 1 + 2 * 10;  // AllocStack
  n += static_cast<size_t>(s.depth) * (1 + 3 * 10);
  for (int i = 0; i < s.py_depth; ++i)
    n += (1 + 4 * 10) + (1 + 3 * 10 + s.py[i].file_len + s.py[i].function_len);
  return n;
}

uint8_t* write_stack(uint8_t* p, const CapturedStack& s, uint32_t* records) {
  uint32_t native_leaf = 0, py_leaf = 0;
  bool fresh;
  for (int i = s.depth - 1; i >= 0; --i) {  // root first: a parent is written before its child
    uint32_t id = intern_node(s.ips[i], 0, native_leaf, &fresh);
    if (fresh) {
      p = format::put_u8(p, static_cast<uint8_t>(RecordType::StackNode));
      p = format::put_varint(p, id);
      p = format::put_varint(p, native_leaf);
      p = format::put_varint(p, s.ips[i]);
      ++*records;
    }
    native_leaf = id;
  }
  for (int i = s.py_depth - 1; i >= 0; --i) {
    const PyFrameRef& f = s.py[i];
    uint32_t code = intern_code(f.code_hash, &fresh);
    if (fresh) {
      p = format::put_u8(p, static_cast<uint8_t>(RecordType::PyCode));
      p = format::put_varint(p, code);
      p = format::put_bytes(p, f.file, f.file_len);
      p = format::put_bytes(p, f.function, f.function_len);
      ++*records;
    }
    uint32_t id = intern_node(f.code_hash, f.line | (1ull << 63), py_leaf, &fresh);
    if (fresh) {
      p = format::put_u8(p, static_cast<uint8_t>(RecordType::PyStackNode));
      p = format::put_varint(p, id);
      p = format::put_varint(p, py_leaf);
      p = format::put_varint(p, code);
      p = format::put_varint(p, f.line);
      ++*records;
    }
    py_leaf = id;
  }
  p = format::put_u8(p, static_cast<uint8_t>(RecordType::AllocStack));
  p = format::put_varint(p, native_leaf);
  p = format::put_varint(p, py_leaf);
  ++*records;
  return p;
}

}  // namespace vramtrace::interpose

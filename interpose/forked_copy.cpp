// A forked copy of the traced program (the pre-flight's child, which runs the program's own
// training loop on PyTorch's fake tensors while the parent waits) must not call CUDA: a child of
// a process that started CUDA gets "initialization error" from every runtime call, and its
// descriptors of the driver are /dev/null besides. Fake CUDA tensors make no memory and launch
// nothing, yet PyTorch still asks the runtime which device is current (each backend choice reads
// the current device's properties, kept from the parent) and how many there are. So, in the
// child only, every loaded library's imports of those few runtime functions are rebound to
// answers from what the parent had (its current device and device count); every other CUDA call
// still fails there, as it must. The parent's imports are never touched.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace {

int g_device = 0;
int g_device_count = 1;

// The runtime's own error for a device index that is not there (cudaErrorInvalidDevice).
constexpr int kInvalidDevice = 101;

int answer_get_device(int* device) {
  *device = g_device;
  return 0;
}
int answer_set_device(int device) { return device == g_device ? 0 : kInvalidDevice; }
int answer_get_device_count(int* count) {
  *count = g_device_count;
  return 0;
}

struct Answer {
  const char* name;
  void* fn;
};
const Answer kAnswers[] = {
    {"cudaGetDevice", reinterpret_cast<void*>(&answer_get_device)},
    {"cudaSetDevice", reinterpret_cast<void*>(&answer_set_device)},
    {"cudaGetDeviceCount", reinterpret_cast<void*>(&answer_get_device_count)},
};

void* answer_for(const char* name) {
  if (std::strncmp(name, "cuda", 4) != 0) return nullptr;
  for (const auto& a : kAnswers)
    if (std::strcmp(name, a.name) == 0) return a.fn;
  return nullptr;
}

// The import slots' relocation types; elsewhere no slot is rebound (the copy then says it
// cannot run).
#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT;
#else
constexpr uint32_t kJumpSlot = ~0u, kGlobDat = ~0u;
#endif

// Entries of the dynamic section hold addresses already relocated by the loader on most
// systems, offsets from the object's base on some: read either as an address.
uintptr_t dyn_address(uintptr_t value, uintptr_t base) {
  return value < base ? value + base : value;
}

void write_slot(uintptr_t slot, void* fn) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = slot & ~(page - 1);
  // A slot after relocation may be read-only (RELRO); in this throwaway copy it is made
  // writable and left so.
  if (mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE) != 0) return;
  *reinterpret_cast<void**>(slot) = fn;
}

struct Walk {
  const void* self;  // this library's own address: its imports are left as they are
  int rebound;
};

int rebind_object(dl_phdr_info* info, size_t, void* data) {
  auto* walk = static_cast<Walk*>(data);
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  bool holds_self = false;
  const auto self = reinterpret_cast<uintptr_t>(walk->self);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(base + ph.p_vaddr);
    if (ph.p_type == PT_LOAD && self >= base + ph.p_vaddr && self < base + ph.p_vaddr + ph.p_memsz)
      holds_self = true;
  }
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  if (!dyn || holds_self || std::strstr(name, "linux-vdso") || std::strstr(name, "libcudart"))
    return 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  uintptr_t jmprel = 0, rela = 0;
  size_t jmprel_size = 0, rela_size = 0;
  bool is_rela = true;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_address(d->d_un.d_ptr, base));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(dyn_address(d->d_un.d_ptr, base));
        break;
      case DT_JMPREL: jmprel = dyn_address(d->d_un.d_ptr, base); break;
      case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
      case DT_PLTREL: is_rela = d->d_un.d_val == DT_RELA; break;
      case DT_RELA: rela = dyn_address(d->d_un.d_ptr, base); break;
      case DT_RELASZ: rela_size = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab || !is_rela) return 0;  // both 64-bit targets use RELA
  auto scan = [&](uintptr_t table, size_t size) {
    const auto* r = reinterpret_cast<const ElfW(Rela)*>(table);
    for (size_t n = size / sizeof(ElfW(Rela)), i = 0; table && i < n; ++i) {
      uint32_t type = ELF64_R_TYPE(r[i].r_info);
      if (type != kJumpSlot && type != kGlobDat) continue;
      uint32_t sym = ELF64_R_SYM(r[i].r_info);
      if (sym == 0) continue;
      if (void* fn = answer_for(strtab + symtab[sym].st_name)) {
        write_slot(base + r[i].r_offset, fn);
        ++walk->rebound;
      }
    }
  };
  scan(jmprel, jmprel_size);
  scan(rela, rela_size);
  return 0;
}

}  // namespace

// Called (through ctypes, by the start-up hook) in the forked copy only, before it runs
// anything on fake tensors: `device` is the parent's current device, `device_count` its count.
// Returns how many imports were rebound (0: none found, the copy will fail at its first device
// query and say so).
extern "C" __attribute__((visibility("default"))) int vramtrace_v1_forked_copy(int device,
                                                                               int device_count) {
  g_device = device;
  g_device_count = device_count;
  Walk walk{reinterpret_cast<const void*>(&vramtrace_v1_forked_copy), 0};
  dl_iterate_phdr(rebind_object, &walk);
  return walk.rebound;
}

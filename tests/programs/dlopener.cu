// Test program: starts CUDA, then dlopens libdl_alloc.so (path in argv[1]) and calls its
// dl_allocate(): a library unknown to the first module map. Expected: one 3 MiB allocation,
// leaked, whose site is dl_allocate in libdl_alloc.cu.
#include <dlfcn.h>
#include "check.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  CHECK(cudaFree(nullptr));  // CUDA is up (and vramtrace with it) before the dlopen
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  auto alloc = reinterpret_cast<void* (*)()>(dlsym(lib, "dl_allocate"));
  if (!alloc || !alloc()) return 4;
  std::printf("dlopener done\n");
  return 0;
}

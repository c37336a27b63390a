// Test library, loaded with dlopen after CUDA started (see dlopener.cu): dl_allocate() makes a
// 3 MiB allocation at a known line, which the report must attribute to this library.
#include "check.h"

extern "C" __attribute__((visibility("default"), noinline)) void* dl_allocate() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 3 * MiB));  // libdl_alloc.cu:7
  return p;
}

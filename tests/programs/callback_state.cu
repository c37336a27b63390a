// Test program: which of vramtrace's driver callbacks are enabled, as the CPU stand-in's CUPTI
// state says (vramtrace_standin_is_enabled; stand-in only). Allocates 1 MiB, launches fill<float>
// twice, frees, then prints "memory callbacks enabled: M of 20" and "launch callbacks enabled:
// L of 8", counted over interpose/driver_callbacks.h's two lists. Under vramtrace: 20 and 8;
// with --launches=off: 20 and 0.
#include <dlfcn.h>

#include "check.h"
#include "interpose/driver_callbacks.h"

template <typename T>
__global__ void fill(T* p, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main() {
  float* a;
  CHECK(cudaMalloc(&a, 1 * MiB));
  for (int i = 0; i < 2; ++i) fill<float><<<256, 256>>>(a, 1.0f, int(MiB / sizeof(float)));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(a));
  auto is_enabled =
      reinterpret_cast<int (*)(int, int)>(dlsym(RTLD_DEFAULT, "vramtrace_standin_is_enabled"));
  if (!is_enabled) {
    std::printf("not the CPU stand-in: callback state unknown\n");
    return 2;
  }
  int memory = 0, launch = 0;
  for (CUpti_CallbackId id : vramtrace::interpose::kMemoryCallbacks)
    memory += is_enabled(CUPTI_CB_DOMAIN_DRIVER_API, static_cast<int>(id)) == 1;
  for (CUpti_CallbackId id : vramtrace::interpose::kLaunchCallbacks)
    launch += is_enabled(CUPTI_CB_DOMAIN_DRIVER_API, static_cast<int>(id)) == 1;
  std::printf("memory callbacks enabled: %d of %zu\n", memory,
              sizeof vramtrace::interpose::kMemoryCallbacks / sizeof(CUpti_CallbackId));
  std::printf("launch callbacks enabled: %d of %zu\n", launch,
              sizeof vramtrace::interpose::kLaunchCallbacks / sizeof(CUpti_CallbackId));
  return 0;
}

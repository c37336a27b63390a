// Test shim for tests/python/package_test.py: preloaded after libvramtrace.so, it makes every
// dlopen of a libcupti* fail the way a missing file does, except one from an nvidia/cu13/lib
// folder (where NVIDIA's pip wheels, which PyTorch depends on, put CUPTI). So the process sees
// a machine whose only CUPTI is a wheel's, even where the CUDA Toolkit is installed.
#include <dlfcn.h>
#include <string.h>

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (file) {
    const char* base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (strncmp(base, "libcupti", 8) == 0 && !strstr(file, "/nvidia/cu13/lib/"))
      return real("/nonexistent/vramtrace-wheel-cupti-only/libcupti.so.13", mode);
  }
  return real(file, mode);
}

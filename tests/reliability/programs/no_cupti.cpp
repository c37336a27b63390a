// Test shim for tests/reliability/nocupti_test.py: preloaded after libvramtrace.so, it makes
// every dlopen of a file named libcupti* fail the way a missing file does, so that the process
// finds no CUPTI anywhere: not the stand-in's, not the CUDA toolkit's (which ld.so.cache and the
// library's fallback directories would otherwise find). Every other dlopen is the real one.
#include <dlfcn.h>
#include <string.h>

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (file) {
    const char* base = strrchr(file, '/');
    base = base ? base + 1 : file;
    // The real loader's own failure, so that dlerror() says what it says for a missing file.
    if (strncmp(base, "libcupti", 8) == 0)
      return real("/nonexistent/vramtrace-no-cupti/libcupti.so.13", mode);
  }
  return real(file, mode);
}

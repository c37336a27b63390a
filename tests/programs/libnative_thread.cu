// Test library for py_nogil.py: native_thread_allocate() makes a 1 MiB allocation from a plain
// native thread of its own (no Python thread state), at a known line, and joins it.
#include <pthread.h>

#include "check.h"

namespace {
void* run(void* out) {
  CHECK(cudaMalloc(static_cast<void**>(out), 1 * MiB));  // libnative_thread.cu:9
  return nullptr;
}
}  // namespace

extern "C" __attribute__((visibility("default"), noinline)) void* native_thread_allocate() {
  void* p = nullptr;
  pthread_t t;
  if (pthread_create(&t, nullptr, run, &p) != 0) return nullptr;
  pthread_join(t, nullptr);
  return p;
}

// Test program for `vramtrace check` and `diff`: 64 MiB of "weights" (cudaMalloc) live with,
// when argv[1] (or else GROW_EXTRA_MIB in the environment: the same command line, for the CI
// gate, which refuses to compare different commands) is given, that many MiB more from
// cudaMallocAsync; all freed before exit. Expected peak: (64 + extra) MiB. GROW_THEN=abort: once
// all is freed, abort() instead of returning (a run cut short, same command line). The extra memory
// comes from grow_activations(), so that its site (built without -g: the function's name alone)
// differs from main's.
#include <cstdlib>
#include <string>
#include "check.h"

extern "C" __attribute__((noinline)) void* grow_activations(size_t bytes, cudaStream_t s) {
  void* x = nullptr;
  CHECK(cudaMallocAsync(&x, bytes, s));
  return x;
}

int main(int argc, char** argv) {
  const char* env = std::getenv("GROW_EXTRA_MIB");
  const char* arg = argc > 1 ? argv[1] : env;
  size_t extra = arg ? std::strtoull(arg, nullptr, 10) * MiB : 0;
  void *w, *x = nullptr;
  CHECK(cudaMalloc(&w, 64 * MiB));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  if (extra) x = grow_activations(extra, s);
  CHECK(cudaStreamSynchronize(s));
  if (x) CHECK(cudaFreeAsync(x, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(w));
  const char* then = std::getenv("GROW_THEN");
  if (then && std::string(then) == "abort") std::abort();
  return 0;
}

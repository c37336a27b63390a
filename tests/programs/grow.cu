// Test program for `vramtrace check` and `diff`: 64 MiB of "weights" (cudaMalloc) live with,
// when argv[1] is given, argv[1] MiB more from cudaMallocAsync; all freed before exit.
// Expected peak: (64 + argv[1]) MiB. The extra memory comes from grow_activations(), so that
// its site (built without -g: the function's name alone) differs from main's.
#include <cstdlib>
#include "check.h"

extern "C" __attribute__((noinline)) void* grow_activations(size_t bytes, cudaStream_t s) {
  void* x = nullptr;
  CHECK(cudaMallocAsync(&x, bytes, s));
  return x;
}

int main(int argc, char** argv) {
  size_t extra = argc > 1 ? std::strtoull(argv[1], nullptr, 10) * MiB : 0;
  void *w, *x = nullptr;
  CHECK(cudaMalloc(&w, 64 * MiB));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  if (extra) x = grow_activations(extra, s);
  CHECK(cudaStreamSynchronize(s));
  if (x) CHECK(cudaFreeAsync(x, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(w));
  return 0;
}

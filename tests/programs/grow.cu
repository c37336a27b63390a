// Test program for `vramtrace check` and `diff`: 64 MiB of "weights" (cudaMalloc) live with,
// when argv[1] is given, argv[1] MiB more from cudaMallocAsync; all freed before exit.
// Expected peak: (64 + argv[1]) MiB.
#include <cstdlib>
#include "check.h"

int main(int argc, char** argv) {
  size_t extra = argc > 1 ? std::strtoull(argv[1], nullptr, 10) * MiB : 0;
  void *w, *x = nullptr;
  CHECK(cudaMalloc(&w, 64 * MiB));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  if (extra) CHECK(cudaMallocAsync(&x, extra, s));
  CHECK(cudaStreamSynchronize(s));
  if (x) CHECK(cudaFreeAsync(x, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(w));
  return 0;
}

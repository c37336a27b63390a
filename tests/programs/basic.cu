// Test program: known allocations, frees, launches and one leak (1 + 4 + 8 MiB live together,
// one of them leaked), launches of fill<float>, pinned host memory allocated and freed. Exits
// with the code given as argv[1] (default 0).
// Its figures: tests/programs/expected.json, "basic".
#include <cstdlib>
#include "check.h"

template <typename T>
__global__ void fill(T* p, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main(int argc, char** argv) {
  float *a, *b, *c, *d;
  CHECK(cudaMalloc(&a, 1 * MiB));
  CHECK(cudaMalloc(&b, 2 * MiB));
  CHECK(cudaMalloc(&c, 4 * MiB));
  for (int i = 0; i < 3; ++i) fill<float><<<256, 256>>>(c, 1.0f, int(4 * MiB / sizeof(float)));
  CHECK(cudaGetLastError());
  CHECK(cudaFree(b));
  CHECK(cudaMalloc(&d, 8 * MiB));  // the peak: 1 + 4 + 8 MiB
  CHECK(cudaFree(d));
  CHECK(cudaFree(c));
  void* host;
  CHECK(cudaMallocHost(&host, 64 * 1024));
  CHECK(cudaFreeHost(host));
  CHECK(cudaDeviceSynchronize());
  std::printf("basic done\n");
  return argc > 1 ? std::atoi(argv[1]) : 0;  // `a` is leaked on purpose
}

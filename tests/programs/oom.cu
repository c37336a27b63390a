// Test program: goes out of memory on purpose. Run with a device capacity of 64 MiB (stand-in)
// or pass the request size in MiB as argv[1] on a real GPU: 48 MiB live, then a failed request
// of 32 MiB (or argv[1] MiB); exits 0. Its figures: expected.json, "oom".
#include <cstdlib>
#include "check.h"

int main(int argc, char** argv) {
  size_t request = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 32) * MiB;
  void *held, *big = nullptr;
  CHECK(cudaMalloc(&held, 48 * MiB));
  cudaError_t err = cudaMalloc(&big, request);
  if (err != cudaErrorMemoryAllocation) {
    std::fprintf(stderr, "expected cudaErrorMemoryAllocation, got %s\n", cudaGetErrorString(err));
    return 98;
  }
  cudaGetLastError();
  CHECK(cudaFree(held));
  std::printf("oom seen\n");
  return 0;
}

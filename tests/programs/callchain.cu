// Test program: allocations made through known functions, for the stacks tests.
// allocate_weights() makes the 8 MiB allocation that is the peak, at the line marked below;
// allocate_scratch() a 1 MiB one that stays live (a leak). -g -O0. Figures: expected.json.
#include "check.h"

__attribute__((noinline)) float* allocate_weights(size_t bytes) {
  float* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));  // callchain.cu:8 (the site of the peak)
  return p;
}

__attribute__((noinline)) void* allocate_scratch() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 1 * MiB));  // callchain.cu:14
  return p;
}

int main() {
  float* w = allocate_weights(8 * MiB);
  allocate_scratch();  // leaked on purpose
  CHECK(cudaFree(w));
  std::printf("callchain done\n");
  return 0;
}

// Microbenchmark: ns per cudaMalloc(4 KiB)/cudaFree pair, measured over argv[1] pairs (default
// 200000) after 1000 warm-up pairs, from a call chain a few frames deep. Prints "ns_per_pair=N".
#include <chrono>
#include <cstdlib>
#include "check.h"

__attribute__((noinline)) void pair_at_depth(int depth) {
  if (depth > 0) return pair_at_depth(depth - 1);
  void* p;
  CHECK(cudaMalloc(&p, 4096));
  CHECK(cudaFree(p));
}

int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 200000;
  for (int i = 0; i < 1000; ++i) pair_at_depth(8);
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) pair_at_depth(8);
  auto t1 = std::chrono::steady_clock::now();
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
  std::printf("ns_per_pair=%.0f\n", ns);
  return 0;
}

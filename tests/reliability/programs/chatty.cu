// Reliability test program for a machine without CUPTI (tests/reliability/nocupti_test.py):
// writes lines to stdout and stderr before and after CUDA starts, moves 1 MiB through device
// memory and checks it came back intact, then exits with the code given as argv[1] (default 0).
// Its output must be the same with vramtrace as without, only the library's notice added.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

int main(int argc, char** argv) {
  std::printf("chatty: start\n");
  std::fflush(stdout);
  std::fprintf(stderr, "chatty: on stderr before CUDA\n");
  const size_t n = MiB / sizeof(unsigned);
  std::vector<unsigned> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned>(i * 2654435761u);
  unsigned* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(d, in.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(out.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  unsigned long long sum = 0;
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += out[i];
    same += out[i] == in[i];
  }
  std::printf("chatty: %zu of %zu words came back, sum %llu\n", same, n, sum);
  std::fflush(stdout);
  std::fprintf(stderr, "chatty: on stderr after CUDA\n");
  return argc > 1 ? std::atoi(argv[1]) : 0;
}

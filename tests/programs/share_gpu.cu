// GPU test program for two processes sharing one device (scripts/gpu/check.py).
//   share_gpu hold MIB FLAG SECONDS   allocate MIB, create file FLAG, sleep SECONDS, free
//   share_gpu oom MIB FLAG            wait for FLAG, allocate MIB, then ask for 1 GiB more than
//                                     the driver says is free (an OOM), free, exit 0
#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include "check.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  size_t bytes = std::strtoull(argv[2], nullptr, 10) * MiB;
  void* p;
  if (!std::strcmp(argv[1], "hold")) {
    CHECK(cudaMalloc(&p, bytes));
    std::ofstream(argv[3]) << "held\n";
    sleep(argc > 4 ? std::atoi(argv[4]) : 5);
    CHECK(cudaFree(p));
    return 0;
  }
  while (access(argv[3], F_OK) != 0) usleep(10000);
  CHECK(cudaMalloc(&p, bytes));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  void* big = nullptr;
  cudaError_t err = cudaMalloc(&big, free_b + 1024 * MiB);
  std::printf("oom request: %s\n", err == cudaErrorMemoryAllocation ? "failed as expected" : "??");
  cudaGetLastError();
  CHECK(cudaFree(p));
  return err == cudaErrorMemoryAllocation ? 0 : 3;
}

// Test program for ranks: allocates (RANK + 1) * 16 MiB, frees it, exits 0. Started several
// times by launch_ranks.sh with RANK, LOCAL_RANK, WORLD_SIZE set (4 ranks: expected.json).
#include <cstdlib>
#include "check.h"

int main() {
  const char* r = std::getenv("RANK");
  int rank = r ? std::atoi(r) : 0;
  void* p;
  CHECK(cudaMalloc(&p, (rank + 1) * 16 * MiB));
  CHECK(cudaFree(p));
  return 0;
}

// Test program for the trace's clock: records that carry no time (a UserPool from vramtrace.h,
// the module map) must not move the times of the records after them. Allocates A, sleeps
// 30 ms, names a pool (an untimed record), then allocates B between two CLOCK_MONOTONIC reads
// that it prints: B's time in the trace must lie between them.
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "vramtrace.h"

static unsigned long long monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main() {
  void* a = nullptr;
  void* b = nullptr;
  CHECK(cudaMalloc(&a, 1 * MiB));
  usleep(30000);
  vramtrace_pool_create("clock", 0);
  unsigned long long before = monotonic_ns();
  CHECK(cudaMalloc(&b, 2 * MiB));
  unsigned long long after = monotonic_ns();
  std::printf("window %llu %llu\n", before, after);
  CHECK(cudaFree(b));
  CHECK(cudaFree(a));
  return 0;
}

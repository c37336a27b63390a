// Test program: one process using two devices, like a model split across cuda:0 and cuda:1.
// Device 0 gets 10 MiB, device 1 gets 20 MiB (argv[1], or else TWO_DEVICES_EXTRA_MIB from the
// environment: the same command line for the CI gate, MiB more on device 1); all freed.
// Its figures: expected.json, "two_devices". Needs two devices
// (VRAMTRACE_STANDIN_DEVICES=2 on the stand-in).
#include <cstdlib>
#include "check.h"

int main(int argc, char** argv) {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "two_devices: needs 2 devices, found %d\n", n);
    return 2;
  }
  const char* arg = argc > 1 ? argv[1] : std::getenv("TWO_DEVICES_EXTRA_MIB");
  size_t extra = arg ? std::strtoull(arg, nullptr, 10) * MiB : 0;
  void *a, *b;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&a, 10 * MiB));
  CHECK(cudaSetDevice(1));
  CHECK(cudaMalloc(&b, 20 * MiB + extra));
  CHECK(cudaFree(b));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(a));
  return 0;
}

// Test program: three allocations of 16 MiB (48 MiB live), then a request of 32 MiB (argv[2] MiB
// when given: more than the GPU has) that fails with cudaErrorMemoryAllocation on a 64 MiB device
// (stand-in: VRAMTRACE_STANDIN_DEVICE_BYTES=67108864), and at once, with no other call in between,
// a death the way argv[1] says: "abort", "segv" (a store to address 0), "throw" (an uncaught C++
// exception: std::terminate, SIGABRT), "exit" (_exit(3): no exit handlers, no destructors),
// "kill" (raise(SIGKILL)), "pipe" (a write to a pipe nobody reads: SIGPIPE). The report must
// still hold the three allocations and the failed request (expected.json, "oom_death").
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "check.h"

int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "abort";
  // SIGPIPE at its default, whatever the parent left it at (set before CUDA starts, as a
  // program would).
  if (argc > 1 && !std::strcmp(argv[1], "pipe")) signal(SIGPIPE, SIG_DFL);
  int fds[2];
  if (!std::strcmp(how, "pipe") && pipe(fds) != 0) return 4;
  void* held[3];
  for (void*& p : held) CHECK(cudaMalloc(&p, 16 * MiB));
  void* big = nullptr;
  const size_t request = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 32) * MiB;
  cudaError_t err = cudaMalloc(&big, request);
  if (err != cudaErrorMemoryAllocation) return 98;
  if (!std::strcmp(how, "segv")) *static_cast<volatile int*>(nullptr) = 1;
  if (!std::strcmp(how, "throw")) throw std::runtime_error("out of memory");
  if (!std::strcmp(how, "exit")) _exit(3);
  if (!std::strcmp(how, "kill")) raise(SIGKILL);
  if (!std::strcmp(how, "pipe")) {
    close(fds[0]);
    ssize_t ignored = write(fds[1], "x", 1);
    (void)ignored;
    return 5;  // not reached: SIGPIPE
  }
  std::abort();
}

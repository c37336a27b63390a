// Test program: allocates 5 MiB, launches once (expected.json, "crash"), then dies as argv[1] says:
// "abort" (SIGABRT), "kill" (SIGKILL to itself), "exit7" (_exit(7), skipping exit handlers),
// "segv" (a store to address 0), "pipe" (a write to a pipe nobody reads: SIGPIPE), "handled"
// (abort() with the program's own SIGABRT handler, installed before CUDA starts, which prints
// "program handler: 6" and calls _exit(9)).
#include <unistd.h>
#include <csignal>
#include <cstring>
#include "check.h"

__global__ void touch(char* p) { p[threadIdx.x] = 1; }

void on_abort(int sig) {
  char line[] = "program handler: 0\n";
  line[sizeof line - 3] = static_cast<char>('0' + sig % 10);
  ssize_t ignored = write(1, line, sizeof line - 1);
  (void)ignored;
  _exit(9);
}

int main(int argc, char** argv) {
  // SIGPIPE at its default, whatever the parent left it at (set before CUDA starts, as a
  // program would).
  if (argc > 1 && !std::strcmp(argv[1], "pipe")) signal(SIGPIPE, SIG_DFL);
  if (argc > 1 && !std::strcmp(argv[1], "handled")) signal(SIGABRT, on_abort);
  char* p;
  CHECK(cudaMalloc(&p, 5 * MiB));
  touch<<<1, 32>>>(p);
  CHECK(cudaDeviceSynchronize());
  usleep(300 * 1000);  // longer than the library's flush interval (100 ms)
  const char* how = argc > 1 ? argv[1] : "abort";
  std::printf("crashing: %s\n", how);
  std::fflush(stdout);
  if (!std::strcmp(how, "kill")) kill(getpid(), SIGKILL);
  if (!std::strcmp(how, "exit7")) _exit(7);
  if (!std::strcmp(how, "segv")) *static_cast<volatile int*>(nullptr) = 1;
  if (!std::strcmp(how, "pipe")) {
    int fds[2];
    if (pipe(fds) == 0) {
      close(fds[0]);
      ssize_t ignored = write(fds[1], "x", 1);
      (void)ignored;
    }
  }
  std::abort();
}

// Test program: initialises CUDA, allocates 2 MiB, then forks a child that does not use CUDA
// and exits; the parent frees and exits 0. Expected: one trace (the parent's), no hang, no
// events from the child; its figures: expected.json, "forker".
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

int main() {
  void* p;
  CHECK(cudaMalloc(&p, 2 * MiB));
  pid_t child = fork();
  if (child == 0) {
    std::printf("child ran\n");
    std::exit(0);  // runs exit handlers: the library must stay silent in the child
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(cudaFree(p));
  std::printf("parent done, child status %d\n", WEXITSTATUS(status));
  return 0;
}

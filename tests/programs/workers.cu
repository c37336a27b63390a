// Test program for process trees: the parent never touches CUDA; it forks 3 workers, and worker
// i (0, 1, 2) allocates (i + 1) * 8 MiB, tells the parent, and holds it until all three have
// allocated. Expected: 3 traces, one per worker, all three live at once at the device's peak;
// its figures: expected.json, "workers".
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

int main() {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return 97;
  pid_t kids[3];
  for (int i = 0; i < 3; ++i) {
    kids[i] = fork();
    if (kids[i] == 0) {
      void* p;
      CHECK(cudaMalloc(&p, (i + 1) * 8 * MiB));
      char c = 'r';
      if (write(ready[1], &c, 1) != 1) return 96;
      if (read(go[0], &c, 1) != 1) return 95;
      CHECK(cudaFree(p));
      return 0;
    }
  }
  char c;
  for (int i = 0; i < 3; ++i)
    if (read(ready[0], &c, 1) != 1) return 94;
  for (int i = 0; i < 3; ++i)
    if (write(go[1], "g", 1) != 1) return 93;
  int failed = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("workers done, %d failed\n", failed);
  return failed;
}

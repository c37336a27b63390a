// Test program: one thread allocates and frees in a loop while the main thread forks 200
// children that exit at once through exit() (running exit handlers, where a profiler that
// inherited a held lock would hang). Expected: no hang, exit 0, allocations == frees == the
// count printed, no events from any child.
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <thread>
#include "check.h"

int main() {
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0};
  std::thread worker([&] {
    while (!stop.load()) {
      void* p;
      CHECK(cudaMalloc(&p, 4096));
      CHECK(cudaFree(p));
      pairs.fetch_add(1);
      usleep(20);  // a steady rate, far below what the buffers hold
    }
  });
  while (pairs.load() == 0) usleep(100);
  for (int i = 0; i < 200; ++i) {
    pid_t c = fork();
    if (c == 0) std::exit(0);
    int status = 0;
    waitpid(c, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
  }
  stop.store(true);
  worker.join();
  std::printf("pairs=%ld\n", pairs.load());
  return 0;
}

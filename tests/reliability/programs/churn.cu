// Reliability test program: cudaMalloc/cudaFree pairs in a loop, for the kill, crash and
// bounded-memory tests (tests/reliability/).
//   churn PAIRS PROGRESS_FILE [BYTES] [END]
// PAIRS 0 runs until killed. After each completed pair the number of completed pairs is stored
// in PROGRESS_FILE (8 bytes, mapped shared: it survives SIGKILL and costs no system call).
// END, once PAIRS pairs are done: "exit" (default, exit 0), or 300 ms after the last pair
// "segv" (SIGSEGV) or "throw" (an uncaught C++ exception: std::terminate, SIGABRT). On exit it
// prints the pairs done and the process's peak resident set (VmHWM, from /proc/self/status).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "check.h"

static long vm_hwm_kb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: churn PAIRS PROGRESS_FILE [BYTES] [exit|segv|throw]\n");
    return 2;
  }
  const unsigned long long pairs = std::strtoull(argv[1], nullptr, 10);
  const size_t bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 4096;
  const char* end = argc > 4 ? argv[4] : "exit";
  int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(uint64_t)) != 0) return 3;
  void* m = mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return 3;
  auto* done = static_cast<volatile uint64_t*>(m);

  for (unsigned long long i = 0; pairs == 0 || i < pairs; ++i) {
    void* p;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaFree(p));
    *done = i + 1;
  }
  // Longer than the library's flush interval (100 ms): every pair done is on its way out.
  if (std::strcmp(end, "exit") != 0) usleep(300 * 1000);
  if (!std::strcmp(end, "segv")) *static_cast<volatile int*>(nullptr) = 1;
  if (!std::strcmp(end, "throw")) throw std::runtime_error("churn: uncaught on purpose");
  std::printf("churn done %llu pairs, VmHWM %ld kB\n", pairs, vm_hwm_kb());
  return 0;
}

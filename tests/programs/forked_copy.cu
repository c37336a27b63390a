// Test program: the pre-flight's forked copy asks the preloaded library to answer the CUDA
// runtime's device queries from the parent's values (vramtrace_v1_forked_copy), in the child
// only. Prints what the child and then the parent read; exits 0 when the child was answered and
// the parent's runtime is untouched, 3 when the library is not preloaded.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

int main() {
  void* p;
  CHECK(cudaMalloc(&p, 2 * MiB));
  int device = -1, count = -1;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaGetDeviceCount(&count));
  auto forked_copy =
      reinterpret_cast<int (*)(int, int)>(dlsym(RTLD_DEFAULT, "vramtrace_v1_forked_copy"));
  if (!forked_copy) {
    std::printf("vramtrace_v1_forked_copy not found\n");
    return 3;
  }
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    int rebound = forked_copy(5, 7);
    int d = -1, n = -1;
    int get = cudaGetDevice(&d), counted = cudaGetDeviceCount(&n);
    int same = cudaSetDevice(5), other = cudaSetDevice(1);
    std::printf("child: rebound %s, device %d (%d), count %d (%d), set 5: %d, set 1: %d\n",
                rebound > 0 ? "some" : "none", d, get, n, counted, same, other);
    std::fflush(stdout);
    _exit(rebound > 0 && d == 5 && n == 7 && get == 0 && same == 0 && other == 101 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  int d = -1, n = -1;
  CHECK(cudaGetDevice(&d));
  CHECK(cudaGetDeviceCount(&n));
  int other = cudaSetDevice(5);
  std::printf("parent: device %d, count %d, set 5: %d, child status %d\n", d, n, other,
              WEXITSTATUS(status));
  CHECK(cudaFree(p));
  return WEXITSTATUS(status) == 0 && d == device && n == count && other != 0 ? 0 : 1;
}

// Test program: a native training-like loop with nothing to mark its iterations but its one
// kernel (no NVTX, no vramtrace_step), as tests/gpu/real/native_growth.cu on the GPU: each of 40
// iterations allocates 16 MiB of scratch, launches one kernel over it, frees the scratch, then
// keeps 64 MiB (a history it never frees) and exits 0. On a device too small for the history
// (1000 MiB: the 16th kept buffer does not fit) that cudaMalloc fails and the program returns its
// own code, 3, right after (exit(), not a crash). Its figures: expected.json, "native_loop" and
// "native_loop_oom".
#include <vector>

#include "check.h"

__global__ void step(float* p, size_t n) {
  if (p && n) p[0] = 0.5f;
}

int main() {
  std::vector<void*> kept;
  for (int it = 0; it < 40; ++it) {
    float* scratch = nullptr;
    CHECK(cudaMalloc(&scratch, 16 * MiB));
    step<<<1, 1>>>(scratch, 16 * MiB / sizeof(float));
    CHECK(cudaFree(scratch));
    void* keep = nullptr;
    cudaError_t e = cudaMalloc(&keep, 64 * MiB);  // native_loop.cu:24
    if (e != cudaSuccess) {
      std::fprintf(stderr, "native_loop: %s keeping 64 MiB at iteration %d\n",
                   cudaGetErrorString(e), it);
      return 3;
    }
    kept.push_back(keep);
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("native_loop done\n");
  return 0;
}

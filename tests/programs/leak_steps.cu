// Test program: a training-like loop of 10 iterations that keeps 1 MiB per iteration alive
// (keep_history, a leak that grows), next to 8 MiB of scratch allocated and freed each
// iteration and a kernel launched 3 times per iteration. How iterations are marked is the
// argument: "step" (vramtrace_step), "nvtx" (an NVTX range "train_step" per iteration) or
// "kernel" (nothing: the launch rhythm, one launch of step_begin per iteration). A second
// argument "free" frees what was kept after the loop (growth then shows at the peak only).
#include <cstring>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "check.h"
#include "vramtrace.h"

__global__ void step_begin(float* p) {
  if (p) p[0] = 0;
}
__global__ void work(float* p, int n) {
  if (p && n) p[0] = 1;
}

__attribute__((noinline)) void* keep_history() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 1 * MiB));  // leak_steps.cu:24
  return p;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "step";
  CHECK(cudaFree(nullptr));  // CUDA (and vramtrace) start before the first mark
  float* weights = nullptr;
  CHECK(cudaMalloc(&weights, 4 * MiB));  // set-up: before the first iteration
  std::vector<void*> history;
  for (int i = 0; i < 10; ++i) {
    if (!std::strcmp(mode, "step")) vramtrace_step(i);
    if (!std::strcmp(mode, "nvtx")) nvtxRangePushA("train_step");
    step_begin<<<1, 1>>>(weights);
    float* scratch = nullptr;
    CHECK(cudaMalloc(&scratch, 8 * MiB));
    work<<<1, 1>>>(scratch, 1);
    work<<<1, 1>>>(scratch, 2);
    history.push_back(keep_history());
    CHECK(cudaFree(scratch));
    if (!std::strcmp(mode, "nvtx")) nvtxRangePop();
  }
  CHECK(cudaDeviceSynchronize());
  if (argc > 2 && !std::strcmp(argv[2], "free"))
    for (void* p : history) CHECK(cudaFree(p));
  std::printf("leak_steps done (%s)\n", mode);
  return 0;
}

// A C++/CUDA training-like loop that keeps a buffer every iteration: each of ITERS (40)
// iterations allocates a 16 MiB scratch buffer, runs one kernel over it, frees the scratch and
// then allocates KEEP_MIB (64) MiB that it keeps (a history it never frees). With a KEEP_MIB
// large enough for the GPU (e.g. 8192 on an H200) a cudaMalloc fails part-way: the program says
// so and exits with its own code, 3, right after. FREE_KEPT=1 frees each kept buffer at the end
// of its iteration (the remedy applied). Prints the device's used memory after each iteration.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void step(float* p, size_t n) {
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 0.5f + 1.0f;
}

static long env_or(const char* name, long dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : dflt;
}

int main() {
  const long iters = env_or("ITERS", 40), keep_mib = env_or("KEEP_MIB", 64);
  const bool free_kept = env_or("FREE_KEPT", 0) == 1;
  const size_t scratch_bytes = 16u << 20;
  std::vector<void*> kept;
  for (long it = 0; it < iters; ++it) {
    float* scratch = nullptr;
    if (cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) {
      std::fprintf(stderr, "native_growth: out of memory for the scratch at iteration %ld\n", it);
      return 3;
    }
    const size_t n = scratch_bytes / sizeof(float);
    step<<<(n + 255) / 256, 256>>>(scratch, n);
    cudaDeviceSynchronize();
    cudaFree(scratch);
    void* keep = nullptr;
    cudaError_t e = cudaMalloc(&keep, static_cast<size_t>(keep_mib) << 20);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "native_growth: %s keeping %ld MiB at iteration %ld\n",
                   cudaGetErrorString(e), keep_mib, it);
      return 3;
    }
    if (free_kept)
      cudaFree(keep);
    else
      kept.push_back(keep);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    std::printf("native-figures {\"iteration\": %ld, \"used\": %zu}\n", it, total_b - free_b);
  }
  for (void* p : kept) cudaFree(p);
  return 0;
}

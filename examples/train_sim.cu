// The bundled example (scripts/demo.sh): a training-like loop with the memory habits that
// vramtrace is for. Persistent weights and optimizer state (512 MiB), per-iteration activations
// from a stream-ordered pool (6 x 32 MiB), a history buffer of 4 MiB kept every iteration and
// never freed (a leak that grows), and at the end an evaluation batch that asks for 1 GiB more
// than the device has free (an OOM the program survives).
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>

#define CHECK(call)                                                           \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

constexpr size_t MiB = 1 << 20;

template <typename T>
__global__ void forward_layer(T* act, const T* w, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) act[i] = act[i] * w[i % 1024];
}
template <typename T>
__global__ void backward_layer(T* grad, const T* act, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) grad[i] += act[i];
}
__global__ void adam_step(float* w, const float* m, const float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= 1e-3f * m[i] / (sqrtf(v[i]) + 1e-8f);
}

int main() {
  std::vector<float*> weights(4), state(2);
  for (auto& w : weights) CHECK(cudaMalloc(&w, 64 * MiB));
  for (auto& s : state) CHECK(cudaMalloc(&s, 128 * MiB));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::vector<void*> history;  // kept across iterations: the leak
  const int n = int(32 * MiB / sizeof(float));
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<float*> acts(6);
    for (auto& a : acts) CHECK(cudaMallocAsync(&a, 32 * MiB, stream));
    for (int l = 0; l < 6; ++l)
      forward_layer<float><<<n / 256, 256, 0, stream>>>(acts[l], weights[l % 4], n);
    for (int l = 5; l >= 0; --l)
      backward_layer<float><<<n / 256, 256, 0, stream>>>(acts[l], acts[(l + 1) % 6], n);
    adam_step<<<n / 256, 256, 0, stream>>>(weights[0], state[0], state[1], n);
    for (auto& a : acts) CHECK(cudaFreeAsync(a, stream));
    void* h;
    CHECK(cudaMalloc(&h, 4 * MiB));
    history.push_back(h);
  }
  CHECK(cudaStreamSynchronize(stream));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  void* eval = nullptr;
  cudaError_t err = cudaMalloc(&eval, free_b + 1024 * MiB);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::printf("eval batch of %zu MiB does not fit: out of memory\n", (free_b >> 20) + 1024);
  }
  for (auto& w : weights) CHECK(cudaFree(w));
  for (auto& s : state) CHECK(cudaFree(s));
  std::printf("train_sim: 20 iterations done\n");
  return 0;
}

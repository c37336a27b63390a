// Native GPU workloads for bench/gpu.sh; prints the median ns per operation as JSON.
//   gpu_native launch   200,000 launches of an empty kernel (ns per launch)
//   gpu_native async    200,000 cudaMallocAsync(1 MiB)/cudaFreeAsync pairs (ns per pair)
//   gpu_native clock    what the library's hot path is made of, on this machine, no CUDA:
//                         ns per clock_gettime(CLOCK_MONOTONIC) and per mutex lock+unlock
#include <cuda_runtime.h>
#include <pthread.h>
#include <time.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

__global__ void empty_kernel() {}

int clock_costs() {
  const int n = 10000000;
  timespec ts;
  unsigned long long sum = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sum += ts.tv_nsec;
  }
  auto t1 = std::chrono::steady_clock::now();
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  for (int i = 0; i < n; ++i) {
    pthread_mutex_lock(&m);
    sum += i;
    pthread_mutex_unlock(&m);
  }
  auto t2 = std::chrono::steady_clock::now();
  std::printf(
      "{\"mode\": \"clock\", \"clock_gettime_ns\": %.1f, \"mutex_pair_ns\": %.1f, \"sum\": %llu}\n",
      std::chrono::duration<double, std::nano>(t1 - t0).count() / n,
      std::chrono::duration<double, std::nano>(t2 - t1).count() / n, sum % 10);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "clock")) return clock_costs();
  const bool launch = argc > 1 && !std::strcmp(argv[1], "launch");
  cudaStream_t s;
  cudaStreamCreate(&s);
  const int n = 200000, rounds = 7;
  std::vector<double> ns;
  for (int r = 0; r < rounds + 1; ++r) {
    cudaStreamSynchronize(s);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (launch) {
        empty_kernel<<<1, 1, 0, s>>>();
      } else {
        void* p;
        cudaMallocAsync(&p, 1 << 20, s);
        cudaFreeAsync(p, s);
      }
    }
    cudaStreamSynchronize(s);
    auto t1 = std::chrono::steady_clock::now();
    if (r > 0) ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  std::sort(ns.begin(), ns.end());
  if (cudaGetLastError() != cudaSuccess) return 1;
  std::printf("{\"mode\": \"%s\", \"ns_per_op\": %.1f}\n", launch ? "launch" : "async",
              ns[ns.size() / 2]);
  return 0;
}

// Benchmark and test program: a training-like mix of CUDA events through the runtime, the
// rhythm of bench/synth_trace.cpp, for what the library writes per event and what its writer
// thread costs (bench/writer.sh), and for the compressed-vs-raw e2e test:
//   64 weights of 1 to 4 MiB (cudaMalloc, 160 MiB, kept to the end), then ITERATIONS of: at
//   every 100th a 256 MiB workspace (cudaMalloc + cudaFree), 6 activations of 2 to 6 MiB
//   (cudaMallocAsync), 20 launches of 8 kernels, each followed by SPIN_NS of busy waiting (a
//   GPU's launch spacing), and 6 cudaFreeAsync.
// Expected: peak 416 MiB (weights + workspace), 160 MiB live at the end; allocations
// 64 + 6 * ITERATIONS + ceil(ITERATIONS / 100), launches 20 * ITERATIONS.
//   bench_mix [ITERATIONS=1000] [SPIN_NS=0]
// Prints "bench_mix: N iterations", then, after waiting 300 ms for the writer to drain,
// "writer_cpu_ns=W process_cpu_ns=P main_cpu_ns=M" (W: CPU time of the library's writer thread,
// -1 without it; M: this, the allocating thread's).
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include "check.h"

template <int K>
__global__ void layer(float* x) {
  if (x) x[threadIdx.x] += K;
}

namespace {

long long cpu_ns(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The CPU time of the thread named `name` in this process, -1 when there is none. Another
// thread's CPU clock is MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), as pthread_getcpuclockid.
long long thread_cpu_ns(const char* name) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  long long found = -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
    FILE* f = fopen(path.c_str(), "r");
    if (!f) continue;
    char comm[32] = {};
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
    if (strcmp(comm, name) == 0) {
      clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(atoi(e->d_name)) << 3) | 6);
      found = cpu_ns(clock);
      break;
    }
  }
  closedir(d);
  return found;
}

void spin(long ns) {
  if (ns <= 0) return;
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {}
}

void launch(int k, cudaStream_t s, long spin_ns) {
  switch (k) {
    case 0: layer<0><<<1, 32, 0, s>>>(nullptr); break;
    case 1: layer<1><<<1, 32, 0, s>>>(nullptr); break;
    case 2: layer<2><<<1, 32, 0, s>>>(nullptr); break;
    case 3: layer<3><<<1, 32, 0, s>>>(nullptr); break;
    case 4: layer<4><<<1, 32, 0, s>>>(nullptr); break;
    case 5: layer<5><<<1, 32, 0, s>>>(nullptr); break;
    case 6: layer<6><<<1, 32, 0, s>>>(nullptr); break;
    default: layer<7><<<1, 32, 0, s>>>(nullptr); break;
  }
  CHECK(cudaGetLastError());
  spin(spin_ns);
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = argc > 1 ? std::atol(argv[1]) : 1000;
  long spin_ns = argc > 2 ? std::atol(argv[2]) : 0;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void* weights[64];
  for (int i = 0; i < 64; ++i) CHECK(cudaMalloc(&weights[i], (1 + i % 4) * MiB));
  void* act[6];
  for (long it = 0; it < iterations; ++it) {
    if (it % 100 == 0) {
      void* workspace;
      CHECK(cudaMalloc(&workspace, 256 * MiB));
      CHECK(cudaFree(workspace));
    }
    for (int a = 0; a < 6; ++a) CHECK(cudaMallocAsync(&act[a], (2 + (it + a) % 5) * MiB, s));
    for (int k = 0; k < 20; ++k) launch(k % 8, s, spin_ns);
    for (int a = 0; a < 6; ++a) CHECK(cudaFreeAsync(act[a], s));
  }
  CHECK(cudaStreamSynchronize(s));
  std::printf("bench_mix: %ld iterations\n", iterations);
  std::fflush(stdout);
  usleep(300 * 1000);  // three flush periods: the writer has written all but what follows
  std::printf("writer_cpu_ns=%lld process_cpu_ns=%lld main_cpu_ns=%lld\n",
              thread_cpu_ns("vramtrace-write"), cpu_ns(CLOCK_PROCESS_CPUTIME_ID),
              cpu_ns(CLOCK_THREAD_CPUTIME_ID));
  return 0;
}

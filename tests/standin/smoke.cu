// smoke.cu - smoke test for the vramtrace CPU stand-in CUDA stack.
//
// Built with `nvcc -cudart shared` and run with the stand-in libraries first
// on LD_LIBRARY_PATH.  Exercises allocation paths the profiler cares about
// (plain, async, managed, pinned, pitched), copies, a templated kernel launch
// on a stream, events, memory info and provoked out-of-memory with sticky
// error reporting.  Prints "smoke ok" and exits 0 on success.
//
// Optional environment: SMOKE_EXPECT_DEVICES=N checks the device count and,
// for N > 1, that devices have independent capacity; SMOKE_OOM_BYTES=B checks
// that a cudaMalloc of B bytes fails with cudaErrorMemoryAllocation.
//
// Only one buffer is freed with cudaFree; the rest are released by the final
// cudaDeviceReset, so a CUPTI probe sees alloc=3 free=1 launch=1 ctx=1.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

template <typename T>
__global__ void fill(T* p, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "smoke: %s failed: %s (%s) at line %d\n", #call, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_), __LINE__);                                             \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

#define EXPECT(cond)                                                                       \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "smoke: expectation failed: %s at line %d\n", #cond, __LINE__); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static const size_t MiB = 1u << 20;

static int checkTwoDevices() {
  // Fill most of device 1 and check device 0 is unaffected.
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemGetInfo(&free0, &total));
  CHECK(cudaSetDevice(1));
  void* big = nullptr;
  CHECK(cudaMalloc(&big, total / 2));
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free1 == total - total / 2);
  CHECK(cudaSetDevice(0));
  size_t again = 0;
  CHECK(cudaMemGetInfo(&again, &total));
  EXPECT(again == free0);
  CHECK(cudaSetDevice(1));
  CHECK(cudaFree(big));
  CHECK(cudaSetDevice(0));
  std::printf("smoke: two devices have independent capacity\n");
  return 0;
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("smoke: %d device(s), device 0 \"%s\", %zu bytes\n", count, prop.name,
              prop.totalGlobalMem);
  if (const char* want = std::getenv("SMOKE_EXPECT_DEVICES")) {
    EXPECT(count == std::atoi(want));
    if (count > 1 && checkTwoDevices() != 0) return 1;
  }

  // Three buffers, round trip a pattern.
  const size_t sizes[3] = {1 * MiB, 2 * MiB, 4 * MiB};
  int* bufs[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i) CHECK(cudaMalloc(&bufs[i], sizes[i]));
  std::vector<int> host(sizes[2] / sizeof(int)), back(host.size());
  for (size_t i = 0; i < host.size(); ++i) host[i] = (int)(i * 2654435761u);
  CHECK(cudaMemcpy(bufs[2], host.data(), sizes[2], cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bufs[1], bufs[2], sizes[1], cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), bufs[1], sizes[1], cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(back.data(), host.data(), sizes[1]) == 0);
  CHECK(cudaMemset(bufs[0], 0x5a, sizes[0]));
  unsigned char probe[16];
  CHECK(cudaMemcpy(probe, bufs[0], sizeof(probe), cudaMemcpyDeviceToHost));
  EXPECT(probe[0] == 0x5a && probe[15] == 0x5a);

  // Templated kernel on a created stream (kernels do nothing on the stand-in).
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  fill<int><<<4, 256, 0, stream>>>(bufs[0], 7, 1024);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));

  CHECK(cudaFree(bufs[0]));

  // Stream-ordered allocation.
  void* async = nullptr;
  CHECK(cudaMallocAsync(&async, 3 * MiB, stream));
  CHECK(cudaMemsetAsync(async, 0, 3 * MiB, stream));
  CHECK(cudaFreeAsync(async, stream));

  // Managed, pinned, pitched.
  float* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, 1 * MiB));
  managed[0] = 1.5f;
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 1 * MiB));
  std::memset(pinned, 1, 1 * MiB);
  CHECK(cudaFreeHost(pinned));
  void* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&pitched, &pitch, 1000, 10));
  EXPECT(pitch >= 1000);

  // Memory info: the live buffers are 2 + 4 MiB + 1 MiB managed + pitch*10.
  size_t freeBytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&freeBytes, &total));
  size_t expectUsed = sizes[1] + sizes[2] + 1 * MiB + pitch * 10;
  std::printf("smoke: free=%zu total=%zu used=%zu\n", freeBytes, total, total - freeBytes);
  EXPECT(total - freeBytes == expectUsed);

  // Events.
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreateWithFlags(&stop, cudaEventDefault));
  CHECK(cudaEventRecord(start, stream));
  CHECK(cudaEventRecord(stop, stream));
  CHECK(cudaEventSynchronize(stop));
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0.0f);
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));

  // Out of memory: more than the capacity must fail, and be reported once.
  void* tooBig = nullptr;
  cudaError_t oom = cudaMalloc(&tooBig, total + 1);
  EXPECT(oom == cudaErrorMemoryAllocation);
  EXPECT(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
  EXPECT(cudaGetLastError() == cudaSuccess);
  size_t freeAfter = 0;
  CHECK(cudaMemGetInfo(&freeAfter, &total));
  EXPECT(freeAfter == freeBytes);  // the failed allocation took nothing

  if (const char* oomBytes = std::getenv("SMOKE_OOM_BYTES")) {
    size_t want = std::strtoull(oomBytes, nullptr, 10);
    void* p = nullptr;
    EXPECT(cudaMalloc(&p, want) == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
    std::printf("smoke: cudaMalloc(%zu) failed as expected\n", want);
  }

  // A CUDA array counts against capacity too.
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  CHECK(cudaMallocArray(&array, &desc, 256, 256));
  size_t freeArray = 0;
  CHECK(cudaMemGetInfo(&freeArray, &total));
  EXPECT(freeBytes - freeArray == 256 * 256 * sizeof(float));
  CHECK(cudaFreeArray(array));

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaDeviceSynchronize());
  // Reset releases everything still allocated (bufs[1], bufs[2], managed, pitched).
  CHECK(cudaDeviceReset());
  CHECK(cudaMemGetInfo(&freeBytes, &total));
  EXPECT(freeBytes == total);
  std::printf("smoke ok\n");
  return 0;
}

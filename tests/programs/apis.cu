// Test program: each device-memory path once. Expected on device 0, in order:
//   cudaMallocAsync 1 MiB + cudaFreeAsync          (stream-ordered)
//   cudaMallocManaged 2 MiB, freed
//   cudaMallocPitch 1000 x 10 bytes, freed         (pitch printed: bytes = pitch * 10)
//   VMM: cuMemCreate 2 MiB, map, release (still resident), unmap (gone)
//   cudaMalloc 3 MiB kept to the end: final live 3 MiB.
// Peak: 3 MiB + 2 MiB (the VMM handle, while mapped) = 5 MiB if the pitch allocation is
// smaller than 2 MiB; the program prints the figures it expects. The rest: expected.json, "apis".
#include <cuda.h>
#include "check.h"

#define CU(call)                                                                     \
  do {                                                                               \
    CUresult r_ = (call);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, r_); \
      std::exit(99);                                                                 \
    }                                                                                \
  } while (0)

int main() {
  void* keep;
  CHECK(cudaMalloc(&keep, 3 * MiB));

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void* a;
  CHECK(cudaMallocAsync(&a, 1 * MiB, s));
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));

  void* m;
  CHECK(cudaMallocManaged(&m, 2 * MiB));
  CHECK(cudaFree(m));

  void* p;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&p, &pitch, 1000, 10));
  CHECK(cudaFree(p));
  std::printf("pitch_bytes=%zu\n", pitch * 10);

  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t size = ((2 * MiB + gran - 1) / gran) * gran;
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, size, 0, 0, 0));
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, size, &prop, 0));
  CU(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, size, &access, 1));
  CU(cuMemRelease(h));  // still mapped: the memory stays
  CU(cuMemUnmap(va, size));
  CU(cuMemAddressFree(va, size));
  std::printf("vmm_bytes=%zu\n", size);
  CHECK(cudaStreamDestroy(s));
  std::printf("apis done\n");
  return 0;
}

// Test program: a CUDA array of 256 x 256 floats (256 KiB by its descriptor) next to a 1 MiB
// buffer; the array is freed, the buffer kept. Expected: cuArrayCreate 262144 bytes, freed;
// peak 1 MiB + 256 KiB; final live 1 MiB.
#include "check.h"

int main() {
  void* keep;
  CHECK(cudaMalloc(&keep, 1 * MiB));
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t array;
  CHECK(cudaMallocArray(&array, &desc, 256, 256));
  CHECK(cudaFreeArray(array));
  std::printf("arrays done\n");
  return 0;
}

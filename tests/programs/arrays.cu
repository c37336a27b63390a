// Test program: a CUDA array of 256 x 256 floats (256 KiB by its descriptor) next to a 1 MiB
// buffer; the array is freed, the buffer kept.
// Its figures: tests/programs/expected.json, "arrays".
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

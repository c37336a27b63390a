// Test program for the HTML report's escaping: a kernel whose demangled name contains
// "<script>" (a template instantiated with a type named `script`), launched twice, and 1 MiB
// allocated and freed.
#include "check.h"

struct script {};
template <typename T>
__global__ void render(int* p) {
  p[threadIdx.x] = 1;
}

int main() {
  int* p;
  CHECK(cudaMalloc(&p, 1 * MiB));
  render<script><<<1, 32>>>(p);
  render<script><<<1, 32>>>(p);
  CHECK(cudaFree(p));
  CHECK(cudaDeviceSynchronize());
  return 0;
}

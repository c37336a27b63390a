// Test library standing in for cuBLAS (its file's name says cublas, as libcublas.so.13 does):
// cublas_standin_workspace() makes a workspace with cudaMalloc and keeps it, as a cuBLAS
// handle does for the life of a PyTorch process.
#include "check.h"

extern "C" __attribute__((visibility("default"), noinline)) void* cublas_standin_workspace(
    size_t bytes) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  return p;
}

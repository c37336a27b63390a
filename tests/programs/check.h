// Shared by the test programs: stop with a message when a CUDA call fails unexpectedly.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                             \
  do {                                                                          \
    cudaError_t err_ = (call);                                                  \
    if (err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(err_));                                   \
      std::exit(99);                                                            \
    }                                                                           \
  } while (0)

constexpr size_t MiB = 1024 * 1024;

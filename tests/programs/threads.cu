// Test program: 16 threads, each doing 100 cudaMalloc(64 KiB)/cudaFree pairs and keeping one
// 1 MiB buffer to the end. Its figures: expected.json, "threads".
#include <thread>
#include <vector>
#include "check.h"

int main() {
  std::vector<std::thread> threads;
  std::vector<void*> kept(16);
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([t, &kept] {
      for (int i = 0; i < 100; ++i) {
        void* p;
        CHECK(cudaMalloc(&p, 64 * 1024));
        CHECK(cudaFree(p));
      }
      CHECK(cudaMalloc(&kept[t], 1 * MiB));
    });
  for (auto& th : threads) th.join();
  std::printf("threads done\n");
  return 0;
}

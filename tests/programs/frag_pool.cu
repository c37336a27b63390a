// Test program: a sub-allocator annotated through vramtrace.h that fragments and then fails.
// One 64 MiB segment from cudaMalloc; 16 blocks of 4 MiB; every other block freed (8 free
// blocks of 4 MiB: 32 MiB free, the largest free block 4 MiB, external fragmentation 0.875);
// then a request of 8 MiB cannot be served: the pool reports its OOM. The driver never fails.
// Also a second pool on the same device that is only cached at exit (retained, not leaked).
#include <vector>

#include "check.h"
#include "vramtrace.h"

int main() {
  char* base = nullptr;
  CHECK(cudaMalloc(&base, 64 * MiB));
  vramtrace_pool_t pool = vramtrace_pool_create("arena", 0);
  vramtrace_pool_add_segment(pool, base, 64 * MiB);
  std::vector<char*> blocks;
  for (int i = 0; i < 16; ++i) {
    blocks.push_back(base + i * 4 * MiB);
    vramtrace_block_alloc(pool, blocks.back(), 4 * MiB);
  }
  for (int i = 0; i < 16; i += 2) vramtrace_block_free(pool, blocks[i]);
  // 8 MiB: no free block is that large.
  vramtrace_pool_oom(pool, 8 * MiB);

  char* cache = nullptr;
  CHECK(cudaMalloc(&cache, 16 * MiB));
  vramtrace_pool_t cached = vramtrace_pool_create("cache", 0);
  vramtrace_pool_add_segment(cached, cache, 16 * MiB);
  vramtrace_block_alloc(cached, cache, 2 * MiB);
  vramtrace_block_free(cached, cache);
  std::printf("frag_pool done (pool %s)\n", pool ? "annotated" : "absent");
  return 0;  // both segments stay: the arena's 8 blocks in use leak, the cache is retained
}

/* vramtrace.h: tell vramtrace about memory your own allocator hands out inside its segments,
 * and where each iteration of your program starts.
 *
 * Header only, C and C++, no library to link. Every call is a no-op (one pointer test) unless
 * the program runs under vramtrace (libvramtrace.so preloaded): the functions behind these
 * calls are weak symbols that only libvramtrace.so defines. Annotations made before the first
 * CUDA call of the process are not recorded (vramtrace starts with CUDA).
 *
 *   vramtrace_pool_t pool = vramtrace_pool_create("my arena", device);
 *   cudaMalloc(&base, 1 << 30);
 *   vramtrace_pool_add_segment(pool, base, 1 << 30);      // memory the pool carves from
 *   vramtrace_block_alloc(pool, p, bytes);                 // a block handed to the program
 *   vramtrace_block_free(pool, p);
 *   vramtrace_pool_oom(pool, bytes);                       // the pool could not serve a request
 *   vramtrace_step(i);                                     // iteration i starts
 *
 * The report then shows the pool's reserved and in-use bytes over time, its free blocks, the
 * largest free block and external fragmentation (1 - largest free block / free bytes), at the
 * peak and at each OOM, and growth per iteration by the site that allocated each block.
 */
#ifndef VRAMTRACE_H
#define VRAMTRACE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long vramtrace_pool_t; /* 0: no pool (vramtrace absent) */

/* Defined by libvramtrace.so only; null in a process without it. */
extern vramtrace_pool_t vramtrace_v1_pool_create(const char* name, int device)
    __attribute__((weak));
extern void vramtrace_v1_pool_segment(vramtrace_pool_t pool, const void* base, size_t bytes,
                                      int op) __attribute__((weak));
extern void vramtrace_v1_block(vramtrace_pool_t pool, const void* ptr, size_t bytes)
    __attribute__((weak));
extern void vramtrace_v1_pool_oom(vramtrace_pool_t pool, size_t requested)
    __attribute__((weak));
extern void vramtrace_v1_step(long long step) __attribute__((weak));

/* A pool of the named allocator on CUDA device `device` (its ordinal). */
static inline vramtrace_pool_t vramtrace_pool_create(const char* name, int device) {
  return vramtrace_v1_pool_create ? vramtrace_v1_pool_create(name, device) : 0;
}
/* Memory the pool obtained (e.g. from cudaMalloc) and carves blocks from. A free block never
 * spans two segments. */
static inline void vramtrace_pool_add_segment(vramtrace_pool_t pool, const void* base,
                                              size_t bytes) {
  if (vramtrace_v1_pool_segment && pool) vramtrace_v1_pool_segment(pool, base, bytes, 1);
}
/* The pool gave the segment back. */
static inline void vramtrace_pool_remove_segment(vramtrace_pool_t pool, const void* base,
                                                 size_t bytes) {
  if (vramtrace_v1_pool_segment && pool) vramtrace_v1_pool_segment(pool, base, bytes, 0);
}
/* Growable pools (virtual memory mapped piece by piece): a mapped piece joins the pieces next
 * to it, so a free block may span them. */
static inline void vramtrace_pool_map(vramtrace_pool_t pool, const void* base, size_t bytes) {
  if (vramtrace_v1_pool_segment && pool) vramtrace_v1_pool_segment(pool, base, bytes, 2);
}
static inline void vramtrace_pool_unmap(vramtrace_pool_t pool, const void* base, size_t bytes) {
  if (vramtrace_v1_pool_segment && pool) vramtrace_v1_pool_segment(pool, base, bytes, 3);
}
/* A block of `bytes` at `ptr` handed to the program (its stack is recorded like an
 * allocation's). */
static inline void vramtrace_block_alloc(vramtrace_pool_t pool, const void* ptr, size_t bytes) {
  if (vramtrace_v1_block && pool && bytes) vramtrace_v1_block(pool, ptr, bytes);
}
/* The block at `ptr` went back to the pool. */
static inline void vramtrace_block_free(vramtrace_pool_t pool, const void* ptr) {
  if (vramtrace_v1_block && pool) vramtrace_v1_block(pool, ptr, 0);
}
/* The pool could not serve a request of `requested` bytes (the program's out-of-memory). */
static inline void vramtrace_pool_oom(vramtrace_pool_t pool, size_t requested) {
  if (vramtrace_v1_pool_oom && pool) vramtrace_v1_pool_oom(pool, requested);
}
/* Iteration `step` of the program starts (growth is reported per iteration). */
static inline void vramtrace_step(long long step) {
  if (vramtrace_v1_step) vramtrace_v1_step(step);
}

#ifdef __cplusplus
}
#endif
#endif /* VRAMTRACE_H */

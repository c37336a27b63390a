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
 *   vramtrace_range_push("eval"); ... vramtrace_range_pop(); // a phase, like an NVTX range
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
extern void vramtrace_v1_pool_segment(vramtrace_pool_t pool, const void* base, size_t bytes, int op)
    __attribute__((weak));
extern void vramtrace_v1_block(vramtrace_pool_t pool, const void* ptr, size_t bytes)
    __attribute__((weak));
extern void vramtrace_v1_pool_oom(vramtrace_pool_t pool, size_t requested) __attribute__((weak));
extern void vramtrace_v1_step(long long step) __attribute__((weak));
extern int vramtrace_v1_range_push(const char* name) __attribute__((weak));
extern int vramtrace_v1_range_pop(void) __attribute__((weak));
extern int vramtrace_v1_live_devices(void) __attribute__((weak));
extern int vramtrace_v1_live_figures(int device, long long* out, int n) __attribute__((weak));
extern unsigned long long vramtrace_v1_live_mark(void) __attribute__((weak));
extern size_t vramtrace_v1_live_sites(int device, int what, unsigned long long since, int top,
                                      char* buf, size_t cap) __attribute__((weak));
extern const char* vramtrace_v1_cupti_path(void) __attribute__((weak));
extern int vramtrace_v1_stop_launches(unsigned reason) __attribute__((weak));

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

/* A named range of the calling thread starts (recorded like an NVTX range: the report's phases). */
static inline void vramtrace_range_push(const char* name) {
  if (vramtrace_v1_range_push) vramtrace_v1_range_push(name);
}
/* The calling thread's innermost range ends. */
static inline void vramtrace_range_pop(void) {
  if (vramtrace_v1_range_pop) vramtrace_v1_range_pop();
}

/* Kernel launches are not recorded from now on (a launch-bound program that marks its own
 * iterations with vramtrace_step() saves their cost, about 1 us a launch): launch counts and the
 * last kernel before later allocations become unknown, and the report says from when. Returns 1
 * when they were being recorded and now are not, else 0. */
static inline int vramtrace_stop_launches(void) {
  return vramtrace_v1_stop_launches ? vramtrace_v1_stop_launches(0) : 0;
}

/* Live figures of this process, read while it runs (the Python API and the pytest plugin use
 * them). Bytes of device `device`, in this order: live (driver allocations and VMM physical
 * memory), their peak, in use (live minus what vramtrace.h pools hold but have not handed out),
 * the in-use peak since the last vramtrace_live_mark(), the live peak since then, and how many
 * allocations could not be tracked. Returns the number of fields written to `out` (at most `n`);
 * 0 without vramtrace or for a device not seen. */
static inline int vramtrace_live_figures(int device, long long* out, int n) {
  return vramtrace_v1_live_figures ? vramtrace_v1_live_figures(device, out, n) : 0;
}
/* Starts a measurement: the peaks "since the mark" restart from now. Returns the sequence number
 * from which allocations count as made after the mark. */
static inline unsigned long long vramtrace_live_mark(void) {
  return vramtrace_v1_live_mark ? vramtrace_v1_live_mark() : 0;
}

#ifdef __cplusplus
}
#endif
#endif /* VRAMTRACE_H */

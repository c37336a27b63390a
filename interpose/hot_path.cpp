// The hot path: what runs in the traced process per allocation, free and launch, from CUPTI's
// callback to the bytes in the recorder's buffer. This file holds its CUPTI side; the rest is
// named here in the order it runs.
//
//   hot_path.cpp  on_callback         CUPTI's callback: the reentry guard, then by domain
//                 on_driver_api       by the call's site: on_api_exit's allocations (when the
//                                     address and the result exist), on_api_enter's frees
//                                     (recorded before the memory goes) and launches
//                 device_of           context -> device, a lock-free cache
//                 on_alloc_exit       the allocation's stack, its record, the live view
//   stacks.cpp    capture_stack       unwind (outside the lock: the slow part), Python frames
//   live.cpp      live_alloc/_free    the live view (vramtrace.live), its own lock
//   hot_path.cpp  record_alloc, record_free, record_failed, record_launch (kernel names interned
//                 by pointer), record_pool (throttled pool queries)
//   annotate.cpp  push_range/pop_range (NVTX), vramtrace_v1_* (vramtrace.h): names interned by
//                 content
//   emit.h        emit, emit_with_stack: one RecordSlot per record
//   recorder.cpp  RecordSlot          lock, room in the active buffer (a Dropped record when
//                                     records were lost), the time delta; commit on return
//   stacks.cpp    write_stack         new trace-tree nodes and the AllocStack, in the slot
//   intern.h      InternTable         the id of a stack node, a Python code object, a name, and
//                                     whether its record must be written first
//   records.h     put                 the bytes
// Off the hot path: the writer thread (recorder.cpp writer_main, write_frame) swaps the buffers
// and writes each as one frame; cupti_hooks.cpp loads CUPTI and subscribes on_callback.
//
// Only driver-level callbacks are enabled, by id (driver_callbacks.h): every runtime allocation
// reaches the driver exactly once, so one driver callback per allocation means no double
// counting. Frees are recorded before the real free runs, so that the address cannot be handed
// out again in between. With VRAMTRACE_LAUNCHES=off the launch ids are not enabled at all.
#include "interpose/hot_path.h"

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "common/format.h"
#include "interpose/emit.h"
#include "interpose/intern.h"
#include "interpose/live.h"
#include "interpose/recorder.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {
namespace {

using format::Api;
namespace rec = format::rec;

// ---- the few driver functions we call, found at run time -------------------------------------

struct Driver {
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*ctx_get_device_v2)(CUdevice*, CUcontext) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_total_mem)(size_t*, CUdevice) = nullptr;
  CUresult (*device_get_uuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*device_get_mempool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*pool_get_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
};

Driver g_drv;

// ---- context -> device ----------------------------------------------------------------------

constexpr int kMaxContexts = 256;
struct ContextSlot {
  std::atomic<CUcontext> ctx{nullptr};
  std::atomic<int> device{-1};
};
ContextSlot g_contexts[kMaxContexts];

int query_device(CUcontext ctx) {
  CUdevice dev = -1;
  if (g_drv.ctx_get_device_v2 && g_drv.ctx_get_device_v2(&dev, ctx) == CUDA_SUCCESS) return dev;
  if (ctx && g_drv.ctx_push && g_drv.ctx_pop && g_drv.ctx_get_device) {
    if (g_drv.ctx_push(ctx) == CUDA_SUCCESS) {
      CUresult r = g_drv.ctx_get_device(&dev);
      CUcontext popped;
      g_drv.ctx_pop(&popped);
      if (r == CUDA_SUCCESS) return dev;
    }
  }
  if (g_drv.ctx_get_device && g_drv.ctx_get_device(&dev) == CUDA_SUCCESS) return dev;
  return 0;
}

int remember_context(CUcontext ctx, int device) {
  for (auto& slot : g_contexts) {
    CUcontext expected = nullptr;
    if (slot.ctx.load() == ctx || slot.ctx.compare_exchange_strong(expected, ctx)) {
      slot.device.store(device);
      return device;
    }
  }
  return device;  // table full: still correct, just not cached
}

void forget_context(CUcontext ctx) {
  for (auto& slot : g_contexts) {
    if (slot.ctx.load() == ctx) {
      slot.device.store(-1);
      slot.ctx.store(nullptr);
      return;
    }
  }
}

int device_of(CUcontext ctx) {
  for (auto& slot : g_contexts) {
    CUcontext c = slot.ctx.load(std::memory_order_relaxed);
    if (c == ctx) {
      int d = slot.device.load(std::memory_order_relaxed);
      if (d >= 0) return d;
      break;
    }
    if (c == nullptr) break;
  }
  return remember_context(ctx, query_device(ctx));
}

// ---- kernel names, interned by CUPTI's name pointer ----------------------------------------

// CUPTI hands the same pointer for every launch of a kernel, so the pointer is the key: a known
// kernel's (often long, cold) text is not touched.
struct KernelNameSlot {
  const char* name;
  uint32_t id;
  bool same_key(const KernelNameSlot& o) const { return name == o.name; }
};
uint64_t kernel_name_hash(const KernelNameSlot& k) {
  return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(k.name) >> 4) * 2654435761u);
}
InternTable<KernelNameSlot, kernel_name_hash, 16384, InternStorage::kStatic, InternFull::kEverySlot>
    g_kernel_names;
uint32_t g_next_name_id = 1;  // 0 means "no name" (graph launches)
constexpr size_t kMaxNameBytes = 4096;

// ---- the records of each call ---------------------------------------------------------------

uint64_t stream_id(CUstream s) { return reinterpret_cast<uintptr_t>(s); }

void record_alloc(Api api, int device, uint64_t address, uint64_t bytes, CUstream stream,
                  const CapturedStack& stack) {
  emit_with_stack(rec::Alloc{api, static_cast<uint32_t>(device), address, bytes, stream_id(stream),
                             thread_id()},
                  stack);
}

void record_free(Api api, int device, uint64_t address, CUstream stream) {
  if (api != Api::cuMemFreeHost) live_free(LiveKind::Driver, address);
  emit(rec::Free{api, static_cast<uint32_t>(device), address, stream_id(stream), thread_id()});
}

void record_meminfo(int device) {
  size_t free_b = 0, total_b = 0;
  if (!g_drv.mem_get_info || g_drv.mem_get_info(&free_b, &total_b) != CUDA_SUCCESS) return;
  emit(rec::MemInfo{static_cast<uint32_t>(device), free_b, total_b});
}

void record_failed(Api api, int device, uint64_t bytes, CUresult result,
                   const CapturedStack& stack) {
  if (!emit_with_stack(rec::AllocFailed{api, static_cast<uint32_t>(device), bytes,
                                        static_cast<uint64_t>(result), thread_id()},
                       stack))
    return;
  // What the driver says is free at the moment of the OOM (it includes other processes' use).
  if (result == CUDA_ERROR_OUT_OF_MEMORY) record_meminfo(device);
  recorder_flush_failure();  // a death right after the failure must not lose it
}

void record_launch(Api api, int device, CUstream stream, const char* name) {
  // Room for a name of the longest kind: its length is measured only when it is sent, since a
  // known kernel is found by its pointer alone and its (often long, cold) text is not touched.
  RecordSlot slot(2 * format::kMaxFixedRecordBytes + (name ? kMaxNameBytes : 0));
  if (!slot.ok()) return;
  uint8_t* p = slot.begin();
  uint32_t id = 0;
  uint32_t records = 1;
  if (name) {
    // A name not sent before (or not remembered: the table is full): its String goes first.
    const Interned name_id = g_kernel_names.intern(KernelNameSlot{name, 0}, allocate_string_id);
    id = name_id.id;
    if (name_id.fresh) {
      p = format::put(p, rec::String{id, {name, strnlen(name, kMaxNameBytes)}});
      ++records;
    }
  }
  // The String record (if any) carries no time, so the Launch's delta is still right.
  p = format::put(p, rec::Launch{api, static_cast<uint32_t>(device), stream_id(stream), id},
                  slot.delta_ns());
  slot.commit(p, records);
}

void record_vmm_create(int device, uint64_t handle, uint64_t bytes, const CapturedStack& stack) {
  emit_with_stack(rec::VmmCreate{static_cast<uint32_t>(device), handle, bytes}, stack);
}

void record_context(CUcontext ctx, int device) {
  char name[256] = "unknown";
  size_t total = 0;
  CUuuid uuid{};
  if (g_drv.device_get_name) g_drv.device_get_name(name, sizeof name, device);
  if (g_drv.device_total_mem) g_drv.device_total_mem(&total, device);
  if (g_drv.device_get_uuid) g_drv.device_get_uuid(&uuid, device);
  size_t name_len = strnlen(name, sizeof name);
  RecordSlot slot(format::kMaxFixedRecordBytes + name_len + 32);
  if (!slot.ok()) return;
  slot.commit(format::put(slot.begin(),
                          rec::ContextCreate{reinterpret_cast<uintptr_t>(ctx),
                                             static_cast<uint32_t>(device),
                                             total,
                                             {name, name_len},
                                             {uuid.bytes, sizeof uuid.bytes}},
                          slot.delta_ns()));
}

// Stream-ordered pools keep freed memory reserved: their footprint is the reserved size, which
// only the driver knows. Asking it costs three driver calls, so it is asked when a pool is first
// seen and then at most once a millisecond by the coarse clock (or every 256 async calls); the
// driver's high-water mark (RESERVED_MEM_HIGH), sent with each answer, keeps the pool's peak
// exact in between.
constexpr int kMaxPools = 64;
constexpr uint64_t kPoolQueryIntervalNs = 1'000'000;
struct PoolSlot {
  std::atomic<CUmemoryPool> pool{nullptr};
  std::atomic<uint64_t> reserved{UINT64_MAX};
  std::atomic<uint64_t> high{UINT64_MAX};
  std::atomic<uint64_t> last_query_ns{0};
  std::atomic<uint32_t> calls{0};
};
PoolSlot g_pools[kMaxPools];
std::atomic<CUmemoryPool> g_default_pool[kMaxContexts];

void record_pool(int device, CUmemoryPool pool) {
  if (!g_drv.pool_get_attribute) return;
  if (!pool && device >= 0 && device < kMaxContexts) pool = g_default_pool[device].load();
  if (!pool) {
    if (!g_drv.device_get_mempool || g_drv.device_get_mempool(&pool, device) != CUDA_SUCCESS)
      return;
    if (device >= 0 && device < kMaxContexts) g_default_pool[device].store(pool);
  }
  PoolSlot* slot = nullptr;
  for (auto& s : g_pools) {
    CUmemoryPool expected = nullptr;
    if (s.pool.load() == pool || s.pool.compare_exchange_strong(expected, pool)) {
      slot = &s;
      break;
    }
  }
  const uint64_t now = coarse_now_ns();  // enough to space the queries
  if (slot && slot->reserved.load() != UINT64_MAX) {
    bool due = now - slot->last_query_ns.load() >= kPoolQueryIntervalNs ||
               (slot->calls.fetch_add(1) & 255) == 255;
    if (!due) return;
  }
  if (slot) slot->last_query_ns.store(now);
  cuuint64_t reserved = 0, used = 0, high = 0;
  if (g_drv.pool_get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
          CUDA_SUCCESS ||
      g_drv.pool_get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return;
  if (g_drv.pool_get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high) != CUDA_SUCCESS)
    high = reserved;
  if (slot && slot->reserved.exchange(reserved) == reserved && slot->high.exchange(high) == high)
    return;  // unchanged
  emit(rec::PoolUsage{static_cast<uint32_t>(device), reinterpret_cast<uintptr_t>(pool), reserved,
                      used, high});
}

size_t array_element_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 1;
  }
}

uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels) {
  return static_cast<uint64_t>(w) * (h ? h : 1) * (d ? d : 1) * array_element_bytes(f) *
         (channels ? channels : 1);
}

bool succeeded(const CUpti_CallbackData* cb) {
  return cb->functionReturnValue &&
         *static_cast<const CUresult*>(cb->functionReturnValue) == CUDA_SUCCESS;
}

CUresult result_of(const CUpti_CallbackData* cb) {
  return cb->functionReturnValue ? *static_cast<const CUresult*>(cb->functionReturnValue)
                                 : CUDA_SUCCESS;
}

// What an allocation call wrote through its out-parameter (a device pointer, a host pointer or
// an array handle), as the id the records carry; 0 when the call failed and wrote nothing.
template <typename T>
uint64_t allocated_id(const CUpti_CallbackData* cb, const T* out) {
  if (!out || !succeeded(cb)) return 0;
  if constexpr (std::is_pointer_v<T>)
    return reinterpret_cast<uintptr_t>(*out);
  else
    return static_cast<uint64_t>(*out);
}

// An allocation's exit: the record if it worked, an AllocFailed (the OOM moment) if not.
template <typename T>
void on_alloc_exit(const CUpti_CallbackData* cb, Api api, int device, const T* out, uint64_t bytes,
                   CUstream stream) {
  const uint64_t address = allocated_id(cb, out);
  const bool ok = succeeded(cb);
  CapturedStack stack;
  const bool async = api == Api::cuMemAllocAsync || api == Api::cuMemAllocFromPoolAsync;
  if (!async || async_stack_wanted(bytes, !ok)) capture_stack(&stack);
  if (ok) {
    record_alloc(api, device, address, bytes, stream, stack);
    if (api != Api::cuMemHostAlloc && api != Api::cuMemAllocHost)
      live_alloc(LiveKind::Driver, device, address, bytes, stack);
  } else
    record_failed(api, device, bytes, result_of(cb), stack);
}

// The device of the call's context, looked up when a case first needs it: CUPTI calls us at
// both sites of every enabled call, and most cases use one site only.
struct LazyDevice {
  CUcontext ctx;
  int value = -1;
  operator int() {
    if (value < 0) value = device_of(ctx);
    return value;
  }
};

// At a call's entry: launches (the most frequent callbacks) and frees, recorded before the
// address can be handed out again.
void on_api_enter(CUpti_CallbackId cbid, const CUpti_CallbackData* cb, LazyDevice& device) {
  const void* params = cb->functionParams;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      auto* a = static_cast<const cuLaunchKernel_params*>(params);
      record_launch(Api::cuLaunchKernel, device, a->hStream, cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      auto* a = static_cast<const cuLaunchKernelEx_params*>(params);
      record_launch(Api::cuLaunchKernelEx, device, a->config ? a->config->hStream : nullptr,
                    cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(params);
      record_launch(Api::cuLaunchCooperativeKernel, device, a->hStream, cb->symbolName);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      auto* a = static_cast<const cuGraphLaunch_params*>(params);
      record_launch(Api::cuGraphLaunch, device, a->hStream, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: {
      auto* a = static_cast<const cuMemFree_v2_params*>(params);
      if (a->dptr) record_free(Api::cuMemFree, device, a->dptr, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      auto* a = static_cast<const cuMemFreeAsync_params*>(params);
      if (a->dptr) record_free(Api::cuMemFreeAsync, device, a->dptr, a->hStream);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost: {
      auto* a = static_cast<const cuMemFreeHost_params*>(params);
      if (a->p) record_free(Api::cuMemFreeHost, device, reinterpret_cast<uintptr_t>(a->p), nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy: {
      auto* a = static_cast<const cuArrayDestroy_params*>(params);
      if (a->hArray)
        record_free(Api::cuArrayDestroy, device, reinterpret_cast<uintptr_t>(a->hArray), nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: {
      auto* a = static_cast<const cuMemRelease_params*>(params);
      live_free(LiveKind::Vmm, a->handle);
      emit(rec::VmmRelease{a->handle});
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      auto* a = static_cast<const cuMemUnmap_params*>(params);
      emit(rec::VmmUnmap{a->ptr, a->size});
      break;
    }
    default: break;
  }
}

// At a call's exit: allocations, with their address and result known.
void on_api_exit(CUpti_CallbackId cbid, const CUpti_CallbackData* cb, LazyDevice& device) {
  const void* params = cb->functionParams;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      auto* a = static_cast<const cuMemAlloc_v2_params*>(params);
      on_alloc_exit(cb, Api::cuMemAlloc, device, a->dptr, a->bytesize, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto* a = static_cast<const cuMemAllocPitch_v2_params*>(params);
      bool ok = succeeded(cb);
      uint64_t bytes = (ok ? *a->pPitch : a->WidthInBytes) * a->Height;
      on_alloc_exit(cb, Api::cuMemAllocPitch, device, a->dptr, bytes, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      auto* a = static_cast<const cuMemAllocManaged_params*>(params);
      on_alloc_exit(cb, Api::cuMemAllocManaged, device, a->dptr, a->bytesize, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocAsync_params*>(params);
      on_alloc_exit(cb, Api::cuMemAllocAsync, device, a->dptr, a->bytesize, a->hStream);
      if (succeeded(cb)) record_pool(device, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(params);
      on_alloc_exit(cb, Api::cuMemAllocFromPoolAsync, device, a->dptr, a->bytesize, a->hStream);
      if (succeeded(cb)) record_pool(device, a->pool);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      auto* a = static_cast<const cuMemHostAlloc_params*>(params);
      on_alloc_exit(cb, Api::cuMemHostAlloc, device, a->pp, a->bytesize, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      auto* a = static_cast<const cuMemAllocHost_v2_params*>(params);
      on_alloc_exit(cb, Api::cuMemAllocHost, device, a->pp, a->bytesize, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2: {
      auto* a = static_cast<const cuArrayCreate_v2_params*>(params);
      const CUDA_ARRAY_DESCRIPTOR* d = a->pAllocateArray;
      uint64_t bytes = d ? array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
      on_alloc_exit(cb, Api::cuArrayCreate, device, a->pHandle, bytes, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2: {
      auto* a = static_cast<const cuArray3DCreate_v2_params*>(params);
      const CUDA_ARRAY3D_DESCRIPTOR* d = a->pAllocateArray;
      uint64_t bytes =
          d ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
      on_alloc_exit(cb, Api::cuArray3DCreate, device, a->pHandle, bytes, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      if (succeeded(cb)) record_pool(device, nullptr);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      auto* a = static_cast<const cuMemCreate_params*>(params);
      int dev = device;
      if (a->prop && a->prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        dev = a->prop->location.id;
      CapturedStack stack;
      capture_stack(&stack);
      if (succeeded(cb)) {
        record_vmm_create(dev, *a->handle, a->size, stack);
        live_alloc(LiveKind::Vmm, dev, *a->handle, a->size, stack);
      } else
        record_failed(Api::cuMemCreate, dev, a->size, result_of(cb), stack);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      if (!succeeded(cb)) break;
      auto* a = static_cast<const cuMemMap_params*>(params);
      emit(rec::VmmMap{a->ptr, a->size, a->offset, a->handle});
      break;
    }
    default: break;
  }
}

void on_driver_api(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  LazyDevice device{cb->context};
  if (cb->callbackSite == CUPTI_API_ENTER)
    on_api_enter(cbid, cb, device);
  else
    on_api_exit(cbid, cb, device);
}

#ifdef VRAMTRACE_SELF_TIME
// Benchmark build only (target vt_bench_selftime, bench/gpu.sh): the TSC cycles spent
// inside our callback, per driver callback id and site, printed on stderr at exit with the
// TSC's rate measured against CLOCK_MONOTONIC over the process's life.
struct SelfTime {
  std::atomic<uint64_t> calls{0}, cycles{0};
};
constexpr uint32_t kSelfTimeIds = 1024;
SelfTime g_self_time[kSelfTimeIds][2];
uint64_t g_self_tsc0 = __builtin_ia32_rdtsc(), g_self_ns0 = now_ns();

struct SelfTimer {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  const void* data;
  uint64_t t0 = __builtin_ia32_rdtsc();
  ~SelfTimer() {
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid >= kSelfTimeIds) return;
    auto* cb = static_cast<const CUpti_CallbackData*>(data);
    SelfTime& t = g_self_time[cbid][cb->callbackSite == CUPTI_API_ENTER ? 0 : 1];
    t.calls.fetch_add(1, std::memory_order_relaxed);
    t.cycles.fetch_add(__builtin_ia32_rdtsc() - t0, std::memory_order_relaxed);
  }
};

__attribute__((destructor)) void print_self_time() {
  const double ns_per_cycle = static_cast<double>(now_ns() - g_self_ns0) /
                              static_cast<double>(__builtin_ia32_rdtsc() - g_self_tsc0);
  for (uint32_t id = 0; id < kSelfTimeIds; ++id)
    for (int site = 0; site < 2; ++site) {
      const SelfTime& t = g_self_time[id][site];
      if (uint64_t n = t.calls.load())
        fprintf(stderr, "vramtrace-selftime cbid=%u site=%s calls=%llu ns_per_call=%.1f\n", id,
                site ? "exit" : "enter", static_cast<unsigned long long>(n),
                static_cast<double>(t.cycles.load()) * ns_per_cycle / static_cast<double>(n));
    }
}
#endif

}  // namespace

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
#ifdef VRAMTRACE_SELF_TIME
  SelfTimer self_timer{domain, cbid, data};
#endif
  ReentryGuard guard;
  if (!guard.entered_first || !recorder_running()) return;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    on_driver_api(cbid, static_cast<const CUpti_CallbackData*>(data));
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    auto* r = static_cast<const CUpti_ResourceData*>(data);
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
      int device = remember_context(r->context, query_device(r->context));
      record_context(r->context, device);
    } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
      emit(rec::ContextDestroy{reinterpret_cast<uintptr_t>(r->context)});
      forget_context(r->context);
    }
  }
}

uint32_t allocate_string_id() { return g_next_name_id++; }

void find_driver_functions() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) cuda = RTLD_DEFAULT;
  auto find = [cuda](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(cuda, name));
  };
  find(g_drv.ctx_get_device, "cuCtxGetDevice");
  find(g_drv.ctx_get_device_v2, "cuCtxGetDevice_v2");
  find(g_drv.ctx_push, "cuCtxPushCurrent_v2");
  find(g_drv.ctx_pop, "cuCtxPopCurrent_v2");
  find(g_drv.device_get_name, "cuDeviceGetName");
  find(g_drv.device_total_mem, "cuDeviceTotalMem_v2");
  find(g_drv.device_get_uuid, "cuDeviceGetUuid");
  find(g_drv.mem_get_info, "cuMemGetInfo_v2");
  find(g_drv.device_get_mempool, "cuDeviceGetMemPool");
  find(g_drv.pool_get_attribute, "cuMemPoolGetAttribute");
}

}  // namespace vramtrace::interpose

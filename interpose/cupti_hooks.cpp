// CUPTI subscription and callbacks: turns driver API calls into vramtrace records.
//
// Only driver-level callbacks are enabled, by id: every runtime allocation reaches the driver
// exactly once, so one driver callback per allocation means no double counting. Allocations are
// recorded at the callback's exit (when the address and the result exist); frees at its entry,
// before the real free runs, so that the address cannot be handed out again in between.
// Launches are recorded at their entry; with VRAMTRACE_LAUNCHES=off their ids are not enabled.
// CUPTI is loaded with dlopen when the driver calls InitializeInjection: a process without CUPTI,
// or with CUPTI held by another tool, gets one notice on stderr and runs on untouched.
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <type_traits>

#include "common/format.h"
#include "interpose/driver_callbacks.h"
#include "interpose/emit.h"
#include "interpose/hooks.h"
#include "interpose/live.h"
#include "interpose/notice.h"
#include "interpose/recorder.h"
#include "interpose/stacks.h"

#ifndef VRAMTRACE_CUPTI_DIR
#define VRAMTRACE_CUPTI_DIR "/usr/local/cuda/lib64"
#endif

namespace vramtrace::interpose {
namespace {

using format::Api;
namespace rec = format::rec;

// ---- the few CUPTI and driver functions we call, found at run time ---------------------------

struct Cupti {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                              CUpti_SubscriberParams*) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

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

Cupti g_cupti;
Driver g_drv;
CUpti_SubscriberHandle g_subscriber = nullptr;

template <typename F>
void resolve(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

// `env`: VRAMTRACE_CUPTI, tried first.
void* open_cupti(const char* env) {
  if (env && *env) {
    if (void* h = dlopen(env, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  // The soname first: LD_LIBRARY_PATH wins, and a CUPTI the process already loaded is reused.
  if (void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) return h;
  const char* dirs[] = {VRAMTRACE_CUPTI_DIR, "/usr/local/cuda/lib64",
                        "/usr/local/cuda/extras/CUPTI/lib64",
                        "/usr/local/cuda/targets/x86_64-linux/lib"};
  char path[1024];
  for (const char* d : dirs) {
    snprintf(path, sizeof path, "%s/libcupti.so.13", d);
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  const char* home = getenv("CUDA_HOME");
  if (home && *home) {
    snprintf(path, sizeof path, "%s/lib64/libcupti.so.13", home);
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  // Installed with pip (site-packages/vramtrace/_bin/libvramtrace.so): the CUPTI of NVIDIA's
  // wheels that PyTorch depends on, in the same site-packages, for machines with a driver but
  // no CUDA Toolkit.
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&open_cupti), &self) && self.dli_fname) {
    const char* slash = strrchr(self.dli_fname, '/');
    const int dir_len = slash ? static_cast<int>(slash - self.dli_fname) : 0;
    for (const char* rel : {"/../../nvidia/cu13/lib", "/../../nvidia/cuda_cupti/lib"}) {
      snprintf(path, sizeof path, "%.*s%s/libcupti.so.13", dir_len, self.dli_fname, rel);
      if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  return nullptr;
}

char g_cupti_path[1024];  // the file CUPTI was loaded from, for vramtrace_v1_cupti_path

void remember_cupti_path(void* handle) {
  link_map* map = nullptr;
  if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
    snprintf(g_cupti_path, sizeof g_cupti_path, "%s", map->l_name);
}

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
    if (slot.ctx.load() == ctx ||
        slot.ctx.compare_exchange_strong(expected, ctx)) {
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

constexpr uint32_t kNameSlots = 16384;
struct NameSlot {
  const char* key;
  uint32_t id;
};
NameSlot g_names[kNameSlots];  // guarded by the recorder's lock (used only inside a RecordSlot)
uint32_t g_next_name_id = 1;   // 0 means "no name" (graph launches)
constexpr size_t kMaxNameBytes = 4096;

// ---- encoding helpers -----------------------------------------------------------------------

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
    bool fresh = false;  // a name not sent before (or the table is full): its String goes first
    uint32_t h = static_cast<uint32_t>((reinterpret_cast<uintptr_t>(name) >> 4) * 2654435761u);
    for (uint32_t i = 0; i < kNameSlots; ++i) {
      NameSlot& s = g_names[(h + i) % kNameSlots];
      if (s.key == name) {
        id = s.id;
        break;
      }
      if (s.key == nullptr) {
        s.key = name;
        s.id = id = g_next_name_id++;
        fresh = true;
        break;
      }
    }
    if (id == 0) {  // table full: send the name again under a fresh id
      id = g_next_name_id++;
      fresh = true;
    }
    if (fresh) {
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
                                             static_cast<uint32_t>(device), total,
                                             {name, name_len}, {uuid.bytes, sizeof uuid.bytes}},
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
void on_alloc_exit(const CUpti_CallbackData* cb, Api api, int device, const T* out,
                   uint64_t bytes, CUstream stream) {
  const uint64_t address = allocated_id(cb, out);
  const bool ok = succeeded(cb);
  CapturedStack stack;
  const bool async = api == Api::cuMemAllocAsync || api == Api::cuMemAllocFromPoolAsync;
  if (!async || async_stack_wanted(bytes, !ok))
    capture_stack(&stack);
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

void on_driver_api(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  const void* params = cb->functionParams;
  LazyDevice device{cb->context};
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
      if (!enter) {
        auto* a = static_cast<const cuMemAlloc_v2_params*>(params);
        on_alloc_exit(cb, Api::cuMemAlloc, device, a->dptr, a->bytesize,
                      nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2:
      if (!enter) {
        auto* a = static_cast<const cuMemAllocPitch_v2_params*>(params);
        bool ok = succeeded(cb);
        uint64_t bytes = (ok ? *a->pPitch : a->WidthInBytes) * a->Height;
        on_alloc_exit(cb, Api::cuMemAllocPitch, device, a->dptr, bytes, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged:
      if (!enter) {
        auto* a = static_cast<const cuMemAllocManaged_params*>(params);
        on_alloc_exit(cb, Api::cuMemAllocManaged, device, a->dptr,
                      a->bytesize, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
      if (!enter) {
        auto* a = static_cast<const cuMemAllocAsync_params*>(params);
        on_alloc_exit(cb, Api::cuMemAllocAsync, device, a->dptr, a->bytesize,
                      a->hStream);
        if (succeeded(cb)) record_pool(device, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
      if (!enter) {
        auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(params);
        on_alloc_exit(cb, Api::cuMemAllocFromPoolAsync, device, a->dptr,
                      a->bytesize, a->hStream);
        if (succeeded(cb)) record_pool(device, a->pool);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
      if (!enter) {
        auto* a = static_cast<const cuMemHostAlloc_params*>(params);
        on_alloc_exit(cb, Api::cuMemHostAlloc, device, a->pp, a->bytesize, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2:
      if (!enter) {
        auto* a = static_cast<const cuMemAllocHost_v2_params*>(params);
        on_alloc_exit(cb, Api::cuMemAllocHost, device, a->pp, a->bytesize, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2:
      if (!enter) {
        auto* a = static_cast<const cuArrayCreate_v2_params*>(params);
        const CUDA_ARRAY_DESCRIPTOR* d = a->pAllocateArray;
        uint64_t bytes = d ? array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
        on_alloc_exit(cb, Api::cuArrayCreate, device, a->pHandle, bytes, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2:
      if (!enter) {
        auto* a = static_cast<const cuArray3DCreate_v2_params*>(params);
        const CUDA_ARRAY3D_DESCRIPTOR* d = a->pAllocateArray;
        uint64_t bytes =
            d ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
        on_alloc_exit(cb, Api::cuArray3DCreate, device, a->pHandle, bytes, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      if (enter) {
        auto* a = static_cast<const cuMemFree_v2_params*>(params);
        if (a->dptr) record_free(Api::cuMemFree, device, a->dptr, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      if (enter) {
        auto* a = static_cast<const cuMemFreeAsync_params*>(params);
        if (a->dptr) record_free(Api::cuMemFreeAsync, device, a->dptr, a->hStream);
      } else if (succeeded(cb)) {
        record_pool(device, nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
      if (enter) {
        auto* a = static_cast<const cuMemFreeHost_params*>(params);
        if (a->p) record_free(Api::cuMemFreeHost, device, reinterpret_cast<uintptr_t>(a->p),
                              nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy:
      if (enter) {
        auto* a = static_cast<const cuArrayDestroy_params*>(params);
        if (a->hArray)
          record_free(Api::cuArrayDestroy, device, reinterpret_cast<uintptr_t>(a->hArray),
                      nullptr);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
      if (!enter) {
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
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
      if (enter) {
        auto* a = static_cast<const cuMemRelease_params*>(params);
        live_free(LiveKind::Vmm, a->handle);
        emit(rec::VmmRelease{a->handle});
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap:
      if (!enter && succeeded(cb)) {
        auto* a = static_cast<const cuMemMap_params*>(params);
        emit(rec::VmmMap{a->ptr, a->size, a->offset, a->handle});
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
      if (enter) {
        auto* a = static_cast<const cuMemUnmap_params*>(params);
        emit(rec::VmmUnmap{a->ptr, a->size});
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      if (enter) {
        auto* a = static_cast<const cuLaunchKernel_params*>(params);
        record_launch(Api::cuLaunchKernel, device, a->hStream, cb->symbolName);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      if (enter) {
        auto* a = static_cast<const cuLaunchKernelEx_params*>(params);
        record_launch(Api::cuLaunchKernelEx, device, a->config ? a->config->hStream : nullptr,
                      cb->symbolName);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      if (enter) {
        auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(params);
        record_launch(Api::cuLaunchCooperativeKernel, device, a->hStream, cb->symbolName);
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      if (enter) {
        auto* a = static_cast<const cuGraphLaunch_params*>(params);
        record_launch(Api::cuGraphLaunch, device, a->hStream, nullptr);
      }
      break;
    default:
      break;
  }
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


void record_notice(const char* text) {
  size_t n = strnlen(text, 1024);
  RecordSlot slot(16 + n);
  if (!slot.ok()) return;
  slot.commit(format::put(slot.begin(), rec::Notice{{text, n}}));
}

// Whether the launch ids are enabled (VRAMTRACE_LAUNCHES); with launches off they never are.
bool g_launches = true;

// Says why this process is not profiled, on stderr and (when the output is open) in the trace.
void give_up(const char* why) {
  notice(why);
  record_notice(why);
}

}  // namespace

uint32_t allocate_string_id() { return g_next_name_id++; }

bool subscribe_cupti(bool launches, const char* cupti_path) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) cuda = RTLD_DEFAULT;
  resolve(cuda, g_drv.ctx_get_device, "cuCtxGetDevice");
  resolve(cuda, g_drv.ctx_get_device_v2, "cuCtxGetDevice_v2");
  resolve(cuda, g_drv.ctx_push, "cuCtxPushCurrent_v2");
  resolve(cuda, g_drv.ctx_pop, "cuCtxPopCurrent_v2");
  resolve(cuda, g_drv.device_get_name, "cuDeviceGetName");
  resolve(cuda, g_drv.device_total_mem, "cuDeviceTotalMem_v2");
  resolve(cuda, g_drv.device_get_uuid, "cuDeviceGetUuid");
  resolve(cuda, g_drv.mem_get_info, "cuMemGetInfo_v2");
  resolve(cuda, g_drv.device_get_mempool, "cuDeviceGetMemPool");
  resolve(cuda, g_drv.pool_get_attribute, "cuMemPoolGetAttribute");

  void* lib = open_cupti(cupti_path);
  if (!lib) {
    give_up("CUPTI (libcupti.so.13) not found; this process runs without memory profiling "
            "(set VRAMTRACE_CUPTI to its path)");
    return false;
  }
  remember_cupti_path(lib);
  if (const size_t n = strnlen(g_cupti_path, sizeof g_cupti_path)) {
    RecordSlot slot(16 + n);
    if (slot.ok()) slot.commit(format::put(slot.begin(), rec::CuptiLibrary{{g_cupti_path, n}}));
  }
  resolve(lib, g_cupti.subscribe, "cuptiSubscribe");
  resolve(lib, g_cupti.subscribe_v2, "cuptiSubscribe_v2");
  resolve(lib, g_cupti.enable_callback, "cuptiEnableCallback");
  resolve(lib, g_cupti.result_string, "cuptiGetResultString");
  if ((!g_cupti.subscribe && !g_cupti.subscribe_v2) || !g_cupti.enable_callback) {
    give_up("this CUPTI lacks the callback API; this process runs without memory profiling");
    return false;
  }

  CUptiResult r;
  char holder[128] = "";
  if (g_cupti.subscribe_v2) {
    CUpti_SubscriberParams sp{};
    sp.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    sp.subscriberName = "vramtrace";
    sp.oldSubscriberName = holder;
    sp.oldSubscriberSize = sizeof holder;
    r = g_cupti.subscribe_v2(&g_subscriber, on_callback, nullptr, &sp);
  } else {
    r = g_cupti.subscribe(&g_subscriber, on_callback, nullptr);
  }
  if (r != CUPTI_SUCCESS) {
    char why[400];
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      snprintf(why, sizeof why,
               "CUPTI is already held by another tool%s%s%s; this process runs without memory "
               "profiling",
               holder[0] ? " (" : "", holder, holder[0] ? ")" : "");
    else {
      const char* msg = "unknown error";
      if (g_cupti.result_string) g_cupti.result_string(r, &msg);
      snprintf(why, sizeof why, "cannot subscribe to CUPTI (%s); this process runs without "
               "memory profiling", msg);
    }
    give_up(why);
    return false;
  }
  g_launches = launches;
  enable_driver_callbacks(g_cupti.enable_callback, g_subscriber, 1, g_launches);
  g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                          CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
  g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                          CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  return true;
}

#ifdef VRAMTRACE_SELF_TIME
// Benchmark build only: turns our driver callbacks off and on again inside one process, so
// that tests/gpu/bench_torch.py (launch_bound_ab) can compare steps with and without them in
// the same process (process-to-process spread on the GPU machine is larger than the effect).
extern "C" __attribute__((visibility("default"))) int vramtrace_bench_enable_callbacks(int on) {
  if (!g_subscriber || !g_cupti.enable_callback) return 0;
  return enable_driver_callbacks(g_cupti.enable_callback, g_subscriber, on ? 1 : 0, g_launches);
}
#endif

}  // namespace vramtrace::interpose

// The file CUPTI was loaded from ("" before CUDA started, or when it could not be loaded).
extern "C" __attribute__((visibility("default"))) const char* vramtrace_v1_cupti_path() {
  return vramtrace::interpose::g_cupti_path;
}

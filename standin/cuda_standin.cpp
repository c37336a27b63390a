// cuda_standin.cpp - CPU stand-in for the CUDA driver (built as libcuda.so.1).
//
// Lets programs and the vramtrace profiler run on machines without a GPU.
// "Device memory" is ordinary host memory (256-byte aligned) accounted
// against a per-device capacity, so out-of-memory can be provoked; kernels do
// nothing; streams and events are synchronous.  Every driver function whose
// CUPTI cbid exists fires CUPTI driver-API enter/exit callbacks with the real
// *_params structs from generated_cuda_meta.h, on the calling thread and with
// no internal lock held, so the subscriber can call back into the driver.
// Calls made from inside a callback do not fire nested callbacks.  Context
// creation/destruction fire CUPTI resource callbacks.  cuInit loads the tool
// named by CUDA_INJECTION64_PATH and calls its InitializeInjection(), like the
// real driver.
//
// Environment: VRAMTRACE_STANDIN_DEVICE_BYTES (capacity per device, default
// 80 GiB), VRAMTRACE_STANDIN_DEVICES (device count, default 1).
//
// Simplifications: async frees return memory immediately (no pool caching);
// memory pools are just device tags; VMM reservations are PROT_NONE mmap
// ranges that cuMemMap makes read/write (mappings of the same handle do not
// alias); a cuMemCreate handle counts against capacity until it is both
// released and unmapped everywhere.

#define __CUDA_API_VERSION_INTERNAL 1  // keep cuda.h from renaming our definitions
#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <generated_cuda_meta.h>

#include "standin_internal.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

// ---------------------------------------------------------------------------
// Opaque handle types from cuda.h, defined here.
// ---------------------------------------------------------------------------
struct CUctx_st {
  uint32_t uid;
  int device;
  bool primary;
  bool alive;
};

struct CUstream_st {
  CUcontext ctx;
  unsigned int flags;
  int priority;
  unsigned long long id;
};

struct CUevent_st {
  unsigned int flags;
  bool recorded;
  std::chrono::steady_clock::time_point when;
};

struct CUmemPoolHandle_st {
  int device;
  bool isDefault;
};

struct CUarray_st {
  void* data;
  size_t bytes;
  CUDA_ARRAY3D_DESCRIPTOR desc;
};

namespace {

constexpr size_t kAlignment = 256;
constexpr size_t kGranularity = 2u << 20;                        // 2 MiB VMM granularity
constexpr size_t kMmapThreshold = 1u << 20;                      // blocks this big come from mmap
constexpr unsigned long long kDefaultCapacity = 85899345920ull;  // 80 GiB
constexpr int kMaxCbid = 1024;
static_assert(CUPTI_DRIVER_TRACE_CBID_SIZE < kMaxCbid, "cbid table too small");
static_assert(CUPTI_CBID_RESOURCE_SIZE < kMaxCbid, "cbid table too small");

enum class Kind { Device, Managed, Host, Array };

struct Allocation {
  size_t size;
  size_t mappedBytes;  // nonzero: obtained with mmap (large blocks), else aligned_alloc
  int device;          // -1 for pinned host memory
  CUcontext ctx;       // owning context (nullptr for host memory)
  Kind kind;
};

struct PhysicalHandle {  // cuMemCreate
  size_t size;
  int device;
  int mapCount;
  bool released;
};

struct Mapping {  // cuMemMap
  size_t size;
  CUmemGenericAllocationHandle handle;
};

struct Device {
  unsigned long long capacity = kDefaultCapacity;
  unsigned long long used = 0;
  CUcontext primary = nullptr;  // live primary context or nullptr
  int primaryRefs = 0;
  unsigned int primaryFlags = 0;
  CUmemPoolHandle_st defaultPool{};
};

// All mutable state is guarded by g_mu.  Never hold g_mu across a callback.
std::mutex g_mu;
std::vector<Device> g_devices;
std::unordered_map<uintptr_t, Allocation> g_allocs;
std::unordered_map<CUmemGenericAllocationHandle, PhysicalHandle> g_handles;
std::map<uintptr_t, Mapping> g_mappings;
std::map<uintptr_t, size_t> g_reservations;
CUmemGenericAllocationHandle g_nextHandle = 1;
uint32_t g_nextCtxUid = 1;
unsigned long long g_nextStreamId = 1;

std::atomic<bool> g_initialized{false};
std::recursive_mutex g_initMu;
int g_initState = 0;  // 0 = not started, 1 = in progress, 2 = done

// CUPTI subscriber state.
std::atomic<CUpti_CallbackFunc> g_callback{nullptr};
std::atomic<void*> g_userdata{nullptr};
std::atomic<uint8_t> g_enabled[CUPTI_CB_DOMAIN_SIZE][kMaxCbid];
std::atomic<uint32_t> g_correlationId{0};

thread_local std::vector<CUcontext> t_ctxStack;
thread_local bool t_inCallback = false;

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------
unsigned long long envULL(const char* name, unsigned long long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v) return fallback;
  return x;
}

// Host memory behind an allocation.  Large blocks are MAP_NORESERVE mappings,
// so a test can "allocate" many GiB of device memory without touching RAM.
void* obtainHost(size_t bytes, size_t* mappedBytes) {
  *mappedBytes = 0;
  if (bytes >= kMmapThreshold) {
    size_t len = (bytes + 4095) / 4096 * 4096;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    *mappedBytes = len;
    return p;
  }
  return std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
}

void releaseHost(uintptr_t ptr, const Allocation& a) {
  if (a.mappedBytes)
    munmap(reinterpret_cast<void*>(ptr), a.mappedBytes);
  else
    std::free(reinterpret_cast<void*>(ptr));
}

CUcontext currentCtx() { return t_ctxStack.empty() ? nullptr : t_ctxStack.back(); }

bool validDevice(CUdevice dev) { return dev >= 0 && dev < (int)g_devices.size(); }

// Device of the current context; -1 if there is no usable current context.
int currentDevice() {
  CUcontext c = currentCtx();
  if (!c || !c->alive) return -1;
  return c->device;
}

size_t roundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool callbackWanted(CUpti_CallbackDomain domain, uint32_t cbid) {
  if (t_inCallback || cbid >= (uint32_t)kMaxCbid) return false;
  if (!g_callback.load(std::memory_order_acquire)) return false;
  return g_enabled[domain][cbid].load(std::memory_order_relaxed) != 0;
}

void invokeCallback(CUpti_CallbackDomain domain, uint32_t cbid, const void* data) {
  CUpti_CallbackFunc cb = g_callback.load(std::memory_order_acquire);
  if (!cb) return;
  t_inCallback = true;
  cb(g_userdata.load(std::memory_order_acquire), domain, cbid, data);
  t_inCallback = false;
}

void fireResource(uint32_t cbid, CUcontext ctx, CUstream stream) {
  if (!callbackWanted(CUPTI_CB_DOMAIN_RESOURCE, cbid)) return;
  CUpti_ResourceData data{};
  data.context = ctx;
  data.resourceHandle.stream = stream;
  data.resourceDescriptor = nullptr;
  invokeCallback(CUPTI_CB_DOMAIN_RESOURCE, cbid, &data);
}

// Runs `body` between CUPTI driver-API enter and exit callbacks.
template <typename Body>
CUresult tracedImpl(uint32_t cbid, const char* name, const void* params, const char* symbol,
                    bool needsInit, Body&& body) {
  if (needsInit && !g_initialized.load(std::memory_order_acquire))
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!callbackWanted(CUPTI_CB_DOMAIN_DRIVER_API, cbid)) return body();

  CUresult result = CUDA_SUCCESS;
  uint64_t correlationData = 0;
  CUpti_CallbackData data{};
  data.callbackSite = CUPTI_API_ENTER;
  data.functionName = name;
  data.functionParams = params;
  data.functionReturnValue = &result;
  data.symbolName = symbol;
  data.correlationData = &correlationData;
  data.correlationId = ++g_correlationId;
  data.context = currentCtx();
  data.contextUid = data.context ? data.context->uid : 0;
  invokeCallback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);

  result = body();

  data.callbackSite = CUPTI_API_EXIT;
  data.context = currentCtx();
  data.contextUid = data.context ? data.context->uid : 0;
  invokeCallback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
  return result;
}

// TRACE(name, params, expr): traced call of a function that requires cuInit.
// The expression is variadic only so that it may contain commas.
#define TRACE(NAME, PARAMS, ...)                                              \
  tracedImpl(CUPTI_DRIVER_TRACE_CBID_##NAME, #NAME, &(PARAMS), nullptr, true, \
             [&]() -> CUresult { return (__VA_ARGS__); })
#define TRACE_NOPARAMS(NAME, ...)                                           \
  tracedImpl(CUPTI_DRIVER_TRACE_CBID_##NAME, #NAME, nullptr, nullptr, true, \
             [&]() -> CUresult { return (__VA_ARGS__); })
#define TRACE_NOINIT(NAME, PARAMS, ...)                                        \
  tracedImpl(CUPTI_DRIVER_TRACE_CBID_##NAME, #NAME, &(PARAMS), nullptr, false, \
             [&]() -> CUresult { return (__VA_ARGS__); })
#define TRACE_SYM(NAME, PARAMS, SYMBOL, ...)                                   \
  tracedImpl(CUPTI_DRIVER_TRACE_CBID_##NAME, #NAME, &(PARAMS), (SYMBOL), true, \
             [&]() -> CUresult { return (__VA_ARGS__); })

// ---------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------
CUcontext newContext(int device, bool primary) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUcontext c = new CUctx_st{g_nextCtxUid++, device, primary, true};
  return c;
}

// Frees everything owned by ctx and marks it dead.  The struct itself is kept
// (leaked) so stale handles never dangle.  Fires DESTROY_STARTING first.
void destroyContext(CUcontext ctx) {
  fireResource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, ctx, nullptr);
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_allocs.begin(); it != g_allocs.end();) {
    if (it->second.ctx == ctx) {
      if (it->second.device >= 0) g_devices[it->second.device].used -= it->second.size;
      releaseHost(it->first, it->second);
      it = g_allocs.erase(it);
    } else {
      ++it;
    }
  }
  ctx->alive = false;
  Device& d = g_devices[ctx->device];
  if (d.primary == ctx) {
    d.primary = nullptr;
    d.primaryRefs = 0;
  }
  for (auto& c : t_ctxStack)
    if (c == ctx) c = nullptr;  // only this thread's stack can be fixed up
  while (!t_ctxStack.empty() && t_ctxStack.back() == nullptr) t_ctxStack.pop_back();
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------
// Allocates `bytes` of "device" memory on `device` (or pinned host memory when
// kind == Host), recording it so frees give the right amount back.
CUresult allocate(void** out, size_t bytes, int device, Kind kind) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) {
    *out = nullptr;
    return kind == Kind::Host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  if (kind != Kind::Host && device < 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mu);
  if (kind != Kind::Host) {
    Device& d = g_devices[device];
    if (bytes > d.capacity - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t mappedBytes = 0;
  void* p = obtainHost(bytes, &mappedBytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a{bytes, mappedBytes, kind == Kind::Host ? -1 : device,
               kind == Kind::Host ? nullptr : currentCtx(), kind};
  if (kind != Kind::Host) g_devices[device].used += bytes;
  g_allocs[reinterpret_cast<uintptr_t>(p)] = a;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult release(uintptr_t ptr, bool host) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocs.find(ptr);
  if (it == g_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  if ((it->second.kind == Kind::Host) != host) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.device >= 0) g_devices[it->second.device].used -= it->second.size;
  releaseHost(ptr, it->second);
  g_allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult allocDevice(CUdeviceptr* dptr, size_t bytes, int device, Kind kind = Kind::Device) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  CUresult r = allocate(&p, bytes, device, kind);
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return r;
}

CUresult freeDevice(CUdeviceptr p) {
  if (p == 0) return CUDA_SUCCESS;
  return release(p, false);
}

int streamDevice(CUstream s) {
  if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && s->ctx && s->ctx->alive)
    return s->ctx->device;
  return currentDevice();
}

CUresult copy(void* dst, const void* src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(dst, src, n);
  return CUDA_SUCCESS;
}

template <typename T>
CUresult fill(CUdeviceptr dst, T value, size_t n) {
  if (n && !dst) return CUDA_ERROR_INVALID_VALUE;
  T* p = reinterpret_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) p[i] = value;
  return CUDA_SUCCESS;
}

template <typename T>
CUresult fill2D(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height) {
  for (size_t y = 0; y < height; ++y) {
    CUresult r = fill<T>(dst + y * pitch, value, width);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

const char* ptrOf(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray arr) {
  switch (type) {
    case CU_MEMORYTYPE_HOST: return static_cast<const char*>(host);
    case CU_MEMORYTYPE_ARRAY: return arr ? static_cast<const char*>(arr->data) : nullptr;
    default: return reinterpret_cast<const char*>(dev ? dev : reinterpret_cast<CUdeviceptr>(host));
  }
}

CUresult copy2D(const CUDA_MEMCPY2D* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  const char* src = ptrOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray);
  char* dst = const_cast<char*>(ptrOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray));
  if (!src || !dst) return CUDA_ERROR_INVALID_VALUE;
  size_t srcPitch = c->srcMemoryType == CU_MEMORYTYPE_ARRAY ? c->WidthInBytes : c->srcPitch;
  size_t dstPitch = c->dstMemoryType == CU_MEMORYTYPE_ARRAY ? c->WidthInBytes : c->dstPitch;
  for (size_t y = 0; y < c->Height; ++y)
    std::memmove(dst + (c->dstY + y) * dstPitch + c->dstXInBytes,
                 src + (c->srcY + y) * srcPitch + c->srcXInBytes, c->WidthInBytes);
  return CUDA_SUCCESS;
}

size_t formatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 4;
  }
}

CUresult createArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = desc.Width * (desc.Height ? desc.Height : 1) * (desc.Depth ? desc.Depth : 1) *
                 (desc.NumChannels ? desc.NumChannels : 1) * formatBytes(desc.Format);
  void* p = nullptr;
  CUresult r = allocate(&p, bytes, currentDevice(), Kind::Array);
  if (r != CUDA_SUCCESS) return r;
  *out = new CUarray_st{p, bytes, desc};
  return CUDA_SUCCESS;
}

CUresult destroyArray(CUarray a) {
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = release(reinterpret_cast<uintptr_t>(a->data), false);
  if (r == CUDA_SUCCESS) delete a;
  return r;
}

// Drops the capacity held by a physical handle once it is released and unmapped.
void maybeRetireHandle(CUmemGenericAllocationHandle h) {
  auto it = g_handles.find(h);
  if (it == g_handles.end()) return;
  if (it->second.released && it->second.mapCount == 0) {
    g_devices[it->second.device].used -= it->second.size;
    g_handles.erase(it);
  }
}

// ---------------------------------------------------------------------------
// Device attributes
// ---------------------------------------------------------------------------
int attributeValue(CUdevice_attribute a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 1;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 64;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 1 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
  }
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
const ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "primary context active"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* findError(CUresult e) {
  for (const auto& x : kErrors)
    if (x.code == e) return &x;
  return nullptr;
}

// ---------------------------------------------------------------------------
// Launch helpers
// ---------------------------------------------------------------------------
CUresult launch(CUfunction f) { return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
const char* symbolOf(CUfunction f) { return f ? f->name : nullptr; }

CUresult doEventElapsed(float* ms, CUevent a, CUevent b) {
  if (!ms || !a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return CUDA_SUCCESS;
}

CUresult doEventRecord(CUevent e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

CUresult doStreamCreate(CUstream* out, unsigned int flags, int priority) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c = currentCtx();
  if (!c || !c->alive) return CUDA_ERROR_INVALID_CONTEXT;
  CUstream s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    s = new CUstream_st{c, flags, priority, g_nextStreamId++};
  }
  *out = s;
  fireResource(CUPTI_CBID_RESOURCE_STREAM_CREATED, c, s);
  return CUDA_SUCCESS;
}

CUresult doStreamDestroy(CUstream s) {
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  fireResource(CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, s->ctx, s);
  delete s;
  return CUDA_SUCCESS;
}

CUresult doPrimaryRetain(CUcontext* out, CUdevice dev) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext created = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Device& d = g_devices[dev];
    if (!d.primary) {
      d.primary = new CUctx_st{g_nextCtxUid++, dev, true, true};
      created = d.primary;
    }
    d.primaryRefs++;
    *out = d.primary;
  }
  if (created) fireResource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, created, nullptr);
  return CUDA_SUCCESS;
}

CUresult doPrimaryRelease(CUdevice dev) {
  if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext toDestroy = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Device& d = g_devices[dev];
    if (!d.primary || d.primaryRefs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d.primaryRefs == 0) toDestroy = d.primary;
  }
  if (toDestroy) destroyContext(toDestroy);
  return CUDA_SUCCESS;
}

CUresult doPrimaryReset(CUdevice dev) {
  if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ctx = g_devices[dev].primary;
  }
  if (ctx) destroyContext(ctx);
  return CUDA_SUCCESS;
}

CUresult doCtxCreate(CUcontext* out, CUdevice dev) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext c = newContext(dev, false);
  t_ctxStack.push_back(c);
  *out = c;
  fireResource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, c, nullptr);
  return CUDA_SUCCESS;
}

CUresult doCtxDestroy(CUcontext c) {
  if (!c || !c->alive) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  destroyContext(c);
  return CUDA_SUCCESS;
}

CUresult doCtxSetCurrent(CUcontext c) {
  if (c && !c->alive) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctxStack.empty()) {
    if (c) t_ctxStack.push_back(c);
  } else if (c) {
    t_ctxStack.back() = c;
  } else {
    t_ctxStack.pop_back();
  }
  return CUDA_SUCCESS;
}

CUresult doCtxPop(CUcontext* out) {
  if (t_ctxStack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (out) *out = t_ctxStack.back();
  t_ctxStack.pop_back();
  return CUDA_SUCCESS;
}

CUresult doMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  int dev = currentDevice();
  if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mu);
  const Device& d = g_devices[dev];
  if (freeBytes) *freeBytes = d.capacity - d.used;
  if (totalBytes) *totalBytes = d.capacity;
  return CUDA_SUCCESS;
}

CUresult doMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop) {
  if (!handle || !prop || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  int dev =
      prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : currentDevice();
  if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(g_mu);
  Device& d = g_devices[dev];
  if (size > d.capacity - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used += size;
  CUmemGenericAllocationHandle h = g_nextHandle++;
  g_handles[h] = PhysicalHandle{size, dev, 0, false};
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult doMemRelease(CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_handles.find(h);
  if (it == g_handles.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  maybeRetireHandle(h);
  return CUDA_SUCCESS;
}

CUresult doAddressReserve(CUdeviceptr* ptr, size_t size) {
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  size = roundUp(size, kGranularity);
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mu);
  g_reservations[reinterpret_cast<uintptr_t>(p)] = size;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult doAddressFree(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_reservations.find(ptr);
  if (it == g_reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), it->second);
  (void)size;
  g_reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult doMemMap(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_handles.find(h);
  if (it == g_handles.end() || it->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (size == 0 || size > it->second.size) return CUDA_ERROR_INVALID_VALUE;
  if (g_mappings.count(ptr)) return CUDA_ERROR_ALREADY_MAPPED;
  if (mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  g_mappings[ptr] = Mapping{size, h};
  it->second.mapCount++;
  return CUDA_SUCCESS;
}

CUresult doMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(g_mu);
  bool any = false;
  for (auto it = g_mappings.lower_bound(ptr); it != g_mappings.end() && it->first < ptr + size;) {
    void* p = reinterpret_cast<void*>(it->first);
    madvise(p, it->second.size, MADV_DONTNEED);
    mprotect(p, it->second.size, PROT_NONE);
    auto h = g_handles.find(it->second.handle);
    CUmemGenericAllocationHandle handle = it->second.handle;
    if (h != g_handles.end()) h->second.mapCount--;
    it = g_mappings.erase(it);
    maybeRetireHandle(handle);
    any = true;
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult doInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::recursive_mutex> lock(g_initMu);
  if (g_initState != 0) return CUDA_SUCCESS;  // done, or re-entered from the injection
  g_initState = 1;
  {
    std::lock_guard<std::mutex> memLock(g_mu);
    int count = (int)envULL("VRAMTRACE_STANDIN_DEVICES", 1);
    unsigned long long capacity = envULL("VRAMTRACE_STANDIN_DEVICE_BYTES", kDefaultCapacity);
    g_devices.resize(count > 0 ? count : 0);
    for (int i = 0; i < (int)g_devices.size(); ++i) {
      g_devices[i].capacity = capacity;
      g_devices[i].defaultPool = CUmemPoolHandle_st{i, true};
    }
  }
  g_initialized.store(true, std::memory_order_release);
  if (const char* path = std::getenv("CUDA_INJECTION64_PATH")) {
    if (*path) {
      void* lib = dlopen(path, RTLD_NOW);
      if (!lib) {
        std::fprintf(stderr, "vramtrace stand-in: cannot load %s: %s\n", path, dlerror());
      } else if (auto fn = reinterpret_cast<int (*)(void)>(dlsym(lib, "InitializeInjection"))) {
        fn();
      } else {
        std::fprintf(stderr, "vramtrace stand-in: %s has no InitializeInjection\n", path);
      }
    }
  }
  g_initState = 2;
  return CUDA_SUCCESS;
}

void fillUuid(CUuuid* uuid, CUdevice dev) {
  static const char base[16] = {'v', 'r', 'a', 'm', 't', 'r', 'a', 'c',
                                'e', '-', 's', 't', 'a', 'n', 'd', 0};
  std::memcpy(uuid->bytes, base, 16);
  uuid->bytes[15] = static_cast<char>(dev);
}

}  // namespace

// ===========================================================================
// Internal API used by the stand-in libcupti.so.13
// ===========================================================================
extern "C" void vramtrace_standin_set_subscriber(CUpti_CallbackFunc callback, void* userdata) {
  if (!callback) {
    for (auto& domain : g_enabled)
      for (auto& flag : domain) flag.store(0, std::memory_order_relaxed);
  }
  g_userdata.store(userdata, std::memory_order_release);
  g_callback.store(callback, std::memory_order_release);
}

extern "C" void vramtrace_standin_enable(int enable, int domain, int cbid) {
  for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    if (domain > 0 && d != domain) continue;
    for (int c = 0; c < kMaxCbid; ++c) {
      if (cbid >= 0 && c != cbid) continue;
      g_enabled[d][c].store(enable ? 1 : 0, std::memory_order_relaxed);
    }
  }
}

extern "C" int vramtrace_standin_is_enabled(int domain, int cbid) {
  if (domain <= 0 || domain >= CUPTI_CB_DOMAIN_SIZE || cbid < 0 || cbid >= kMaxCbid) return -1;
  return g_enabled[domain][cbid].load(std::memory_order_relaxed) ? 1 : 0;
}

// ===========================================================================
// Driver API
// ===========================================================================
extern "C" {

// --- Initialization, version, errors ---------------------------------------
CUresult CUDAAPI cuInit(unsigned int Flags) {
  cuInit_params p{Flags};
  return TRACE_NOINIT(cuInit, p, doInit(Flags));
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  cuDriverGetVersion_params p{driverVersion};
  return TRACE_NOINIT(
      cuDriverGetVersion, p,
      driverVersion ? (*driverVersion = 13000, CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  cuGetErrorString_params p{error, pStr};
  return TRACE_NOINIT(cuGetErrorString, p, [&] {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorText* e = findError(error);
    *pStr = e ? e->text : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }());
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  cuGetErrorName_params p{error, pStr};
  return TRACE_NOINIT(cuGetErrorName, p, [&] {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorText* e = findError(error);
    *pStr = e ? e->name : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }());
}

// --- Devices -----------------------------------------------------------------
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  cuDeviceGet_params p{device, ordinal};
  return TRACE(cuDeviceGet, p, [&] {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  cuDeviceGetCount_params p{count};
  return TRACE(cuDeviceGetCount, p,
               count ? (*count = (int)g_devices.size(), CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  cuDeviceGetName_params p{name, len, dev};
  return TRACE(cuDeviceGetName, p, [&] {
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, (size_t)len, "%s", "vramtrace stand-in (CPU)");
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  cuDeviceTotalMem_v2_params p{bytes, dev};
  return TRACE(cuDeviceTotalMem_v2, p, [&] {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(g_mu);
    *bytes = g_devices[dev].capacity;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  cuDeviceGetUuid_params p{uuid, dev};
  return TRACE(cuDeviceGetUuid, p, [&] {
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    fillUuid(uuid, dev);
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  cuDeviceGetUuid_v2_params p{uuid, dev};
  return TRACE(cuDeviceGetUuid_v2, p, [&] {
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    fillUuid(uuid, dev);
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  cuDeviceGetAttribute_params p{pi, attrib, dev};
  return TRACE(cuDeviceGetAttribute, p, [&] {
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *pi = attrib == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID ? dev : attributeValue(attrib);
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  cuDeviceGetDefaultMemPool_params p{pool_out, dev};
  return TRACE(cuDeviceGetDefaultMemPool, p, [&] {
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = &g_devices[dev].defaultPool;
    return CUDA_SUCCESS;
  }());
}

// --- Primary contexts and contexts --------------------------------------------
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  cuDevicePrimaryCtxRetain_params p{pctx, dev};
  return TRACE(cuDevicePrimaryCtxRetain, p, doPrimaryRetain(pctx, dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  cuDevicePrimaryCtxRelease_v2_params p{dev};
  return TRACE(cuDevicePrimaryCtxRelease_v2, p, doPrimaryRelease(dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  cuDevicePrimaryCtxReset_v2_params p{dev};
  return TRACE(cuDevicePrimaryCtxReset_v2, p, doPrimaryReset(dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  cuDevicePrimaryCtxGetState_params p{dev, flags, active};
  return TRACE(cuDevicePrimaryCtxGetState, p, [&] {
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(g_mu);
    if (flags) *flags = g_devices[dev].primaryFlags;
    if (active) *active = g_devices[dev].primary ? 1 : 0;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  cuDevicePrimaryCtxSetFlags_v2_params p{dev, flags};
  return TRACE(cuDevicePrimaryCtxSetFlags_v2, p, [&] {
    if (!validDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lock(g_mu);
    g_devices[dev].primaryFlags = flags;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  cuCtxCreate_v2_params p{pctx, flags, dev};
  return TRACE(cuCtxCreate_v2, p, doCtxCreate(pctx, dev));
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                unsigned int flags, CUdevice dev) {
  cuCtxCreate_v4_params p{pctx, ctxCreateParams, flags, dev};
  return TRACE(cuCtxCreate_v4, p, doCtxCreate(pctx, dev));
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  cuCtxDestroy_v2_params p{ctx};
  return TRACE(cuCtxDestroy_v2, p, doCtxDestroy(ctx));
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  cuCtxGetCurrent_params p{pctx};
  return TRACE(cuCtxGetCurrent, p,
               pctx ? (*pctx = currentCtx(), CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  cuCtxSetCurrent_params p{ctx};
  return TRACE(cuCtxSetCurrent, p, doCtxSetCurrent(ctx));
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  cuCtxPushCurrent_v2_params p{ctx};
  return TRACE(cuCtxPushCurrent_v2, p, [&] {
    if (!ctx || !ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
    t_ctxStack.push_back(ctx);
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  cuCtxPopCurrent_v2_params p{pctx};
  return TRACE(cuCtxPopCurrent_v2, p, doCtxPop(pctx));
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  cuCtxGetDevice_params p{device};
  return TRACE(cuCtxGetDevice, p, [&] {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    int dev = currentDevice();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *device = dev;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  cuCtxGetId_params p{ctx, ctxId};
  return TRACE(cuCtxGetId, p, [&] {
    CUcontext c = ctx ? ctx : currentCtx();
    if (!c || !ctxId) return c ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = c->uid;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  return TRACE_NOPARAMS(cuCtxSynchronize,
                        currentDevice() >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

// --- Memory: device, managed, pitch -------------------------------------------
CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  cuMemGetInfo_v2_params p{free, total};
  return TRACE(cuMemGetInfo_v2, p, doMemGetInfo(free, total));
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  cuMemAlloc_v2_params p{dptr, bytesize};
  return TRACE(cuMemAlloc_v2, p, allocDevice(dptr, bytesize, currentDevice()));
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  cuMemAllocPitch_v2_params p{dptr, pPitch, WidthInBytes, Height, ElementSizeBytes};
  return TRACE(cuMemAllocPitch_v2, p, [&] {
    if (!pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = roundUp(WidthInBytes, 512);
    CUresult r = allocDevice(dptr, pitch * Height, currentDevice());
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
  }());
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  cuMemFree_v2_params p{dptr};
  return TRACE(cuMemFree_v2, p, freeDevice(dptr));
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  cuMemAllocManaged_params p{dptr, bytesize, flags};
  return TRACE(cuMemAllocManaged, p, allocDevice(dptr, bytesize, currentDevice(), Kind::Managed));
}

// --- Memory: stream ordered and pools -----------------------------------------
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  cuMemAllocAsync_params p{dptr, bytesize, hStream};
  return TRACE(cuMemAllocAsync, p, allocDevice(dptr, bytesize, streamDevice(hStream)));
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  cuMemAllocAsync_ptsz_params p{dptr, bytesize, hStream};
  return TRACE(cuMemAllocAsync_ptsz, p, allocDevice(dptr, bytesize, streamDevice(hStream)));
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  cuMemFreeAsync_params p{dptr, hStream};
  return TRACE(cuMemFreeAsync, p, freeDevice(dptr));
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  cuMemFreeAsync_ptsz_params p{dptr, hStream};
  return TRACE(cuMemFreeAsync_ptsz, p, freeDevice(dptr));
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream) {
  cuMemAllocFromPoolAsync_params p{dptr, bytesize, pool, hStream};
  return TRACE(cuMemAllocFromPoolAsync, p,
               pool ? allocDevice(dptr, bytesize, pool->device) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  cuMemAllocFromPoolAsync_ptsz_params p{dptr, bytesize, pool, hStream};
  return TRACE(cuMemAllocFromPoolAsync_ptsz, p,
               pool ? allocDevice(dptr, bytesize, pool->device) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  cuMemPoolCreate_params p{pool, poolProps};
  return TRACE(cuMemPoolCreate, p, [&] {
    if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
    if (!validDevice(poolProps->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    *pool = new CUmemPoolHandle_st{poolProps->location.id, false};
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  cuMemPoolDestroy_params p{pool};
  return TRACE(cuMemPoolDestroy, p, [&] {
    if (!pool || pool->isDefault) return CUDA_ERROR_INVALID_VALUE;
    delete pool;
    return CUDA_SUCCESS;
  }());
}

// --- Memory: pinned host (does not count against device capacity) ------------
CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  cuMemAllocHost_v2_params p{pp, bytesize};
  return TRACE(cuMemAllocHost_v2, p, allocate(pp, bytesize, -1, Kind::Host));
}

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  cuMemHostAlloc_params p{pp, bytesize, Flags};
  return TRACE(cuMemHostAlloc, p, allocate(pp, bytesize, -1, Kind::Host));
}

CUresult CUDAAPI cuMemFreeHost(void* ptr) {
  cuMemFreeHost_params p{ptr};
  return TRACE(cuMemFreeHost, p,
               ptr ? release(reinterpret_cast<uintptr_t>(ptr), true) : CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* ptr, unsigned int Flags) {
  cuMemHostGetDevicePointer_v2_params p{pdptr, ptr, Flags};
  return TRACE(cuMemHostGetDevicePointer_v2, p,
               pdptr ? (*pdptr = reinterpret_cast<CUdeviceptr>(ptr), CUDA_SUCCESS)
                     : CUDA_ERROR_INVALID_VALUE);
}

// --- Memory: copies and sets ----------------------------------------------------
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  cuMemcpy_params p{dst, src, ByteCount};
  return TRACE(cuMemcpy, p, copy((void*)dst, (const void*)src, ByteCount));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream) {
  cuMemcpyAsync_params p{dst, src, ByteCount, hStream};
  return TRACE(cuMemcpyAsync, p, copy((void*)dst, (const void*)src, ByteCount));
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  cuMemcpyHtoD_v2_params p{dstDevice, srcHost, ByteCount};
  return TRACE(cuMemcpyHtoD_v2, p, copy((void*)dstDevice, srcHost, ByteCount));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  cuMemcpyDtoH_v2_params p{dstHost, srcDevice, ByteCount};
  return TRACE(cuMemcpyDtoH_v2, p, copy(dstHost, (const void*)srcDevice, ByteCount));
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  cuMemcpyDtoD_v2_params p{dstDevice, srcDevice, ByteCount};
  return TRACE(cuMemcpyDtoD_v2, p, copy((void*)dstDevice, (const void*)srcDevice, ByteCount));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                      CUstream hStream) {
  cuMemcpyHtoDAsync_v2_params p{dstDevice, srcHost, ByteCount, hStream};
  return TRACE(cuMemcpyHtoDAsync_v2, p, copy((void*)dstDevice, srcHost, ByteCount));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  cuMemcpyDtoHAsync_v2_params p{dstHost, srcDevice, ByteCount, hStream};
  return TRACE(cuMemcpyDtoHAsync_v2, p, copy(dstHost, (const void*)srcDevice, ByteCount));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream) {
  cuMemcpyDtoDAsync_v2_params p{dstDevice, srcDevice, ByteCount, hStream};
  return TRACE(cuMemcpyDtoDAsync_v2, p, copy((void*)dstDevice, (const void*)srcDevice, ByteCount));
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  cuMemcpy2D_v2_params p{pCopy};
  return TRACE(cuMemcpy2D_v2, p, copy2D(pCopy));
}

CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  cuMemcpy2DAsync_v2_params p{pCopy, hStream};
  return TRACE(cuMemcpy2DAsync_v2, p, copy2D(pCopy));
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  cuMemsetD8_v2_params p{dstDevice, uc, N};
  return TRACE(cuMemsetD8_v2, p, fill<unsigned char>(dstDevice, uc, N));
}

CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  cuMemsetD16_v2_params p{dstDevice, us, N};
  return TRACE(cuMemsetD16_v2, p, fill<unsigned short>(dstDevice, us, N));
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  cuMemsetD32_v2_params p{dstDevice, ui, N};
  return TRACE(cuMemsetD32_v2, p, fill<unsigned int>(dstDevice, ui, N));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream) {
  cuMemsetD8Async_params p{dstDevice, uc, N, hStream};
  return TRACE(cuMemsetD8Async, p, fill<unsigned char>(dstDevice, uc, N));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream) {
  cuMemsetD32Async_params p{dstDevice, ui, N, hStream};
  return TRACE(cuMemsetD32Async, p, fill<unsigned int>(dstDevice, ui, N));
}

CUresult CUDAAPI cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                 size_t Width, size_t Height) {
  cuMemsetD2D8_v2_params p{dstDevice, dstPitch, uc, Width, Height};
  return TRACE(cuMemsetD2D8_v2, p, fill2D<unsigned char>(dstDevice, dstPitch, uc, Width, Height));
}

CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                   size_t Width, size_t Height, CUstream hStream) {
  cuMemsetD2D8Async_params p{dstDevice, dstPitch, uc, Width, Height, hStream};
  return TRACE(cuMemsetD2D8Async, p, fill2D<unsigned char>(dstDevice, dstPitch, uc, Width, Height));
}

// --- Arrays ------------------------------------------------------------------------
CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  cuArrayCreate_v2_params p{pHandle, pAllocateArray};
  return TRACE(cuArrayCreate_v2, p, [&] {
    if (!pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = pAllocateArray->Width;
    d.Height = pAllocateArray->Height;
    d.Depth = 0;
    d.Format = pAllocateArray->Format;
    d.NumChannels = pAllocateArray->NumChannels;
    return createArray(pHandle, d);
  }());
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle,
                                    const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  cuArray3DCreate_v2_params p{pHandle, pAllocateArray};
  return TRACE(cuArray3DCreate_v2, p,
               pAllocateArray ? createArray(pHandle, *pAllocateArray) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  cuArrayDestroy_params p{hArray};
  return TRACE(cuArrayDestroy, p, destroyArray(hArray));
}

// --- Virtual memory management ---------------------------------------------------
CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  cuMemGetAllocationGranularity_params p{granularity, prop, option};
  return TRACE(
      cuMemGetAllocationGranularity, p,
      granularity ? (*granularity = kGranularity, CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  cuMemAddressReserve_params p{ptr, size, alignment, addr, flags};
  return TRACE(cuMemAddressReserve, p, doAddressReserve(ptr, size));
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  cuMemAddressFree_params p{ptr, size};
  return TRACE(cuMemAddressFree, p, doAddressFree(ptr, size));
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  cuMemCreate_params p{handle, size, prop, flags};
  return TRACE(cuMemCreate, p, doMemCreate(handle, size, prop));
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  cuMemRelease_params p{handle};
  return TRACE(cuMemRelease, p, doMemRelease(handle));
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  cuMemMap_params p{ptr, size, offset, handle, flags};
  return TRACE(cuMemMap, p, doMemMap(ptr, size, handle));
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  cuMemUnmap_params p{ptr, size};
  return TRACE(cuMemUnmap, p, doMemUnmap(ptr, size));
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  cuMemSetAccess_params p{ptr, size, desc, count};
  return TRACE(cuMemSetAccess, p, desc || count == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

// --- Streams -----------------------------------------------------------------------
CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  cuStreamCreate_params p{phStream, Flags};
  return TRACE(cuStreamCreate, p, doStreamCreate(phStream, Flags, 0));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  cuStreamCreateWithPriority_params p{phStream, flags, priority};
  return TRACE(cuStreamCreateWithPriority, p, doStreamCreate(phStream, flags, priority));
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  cuStreamDestroy_v2_params p{hStream};
  return TRACE(cuStreamDestroy_v2, p, doStreamDestroy(hStream));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  cuStreamSynchronize_params p{hStream};
  return TRACE(cuStreamSynchronize, p, CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  cuStreamSynchronize_ptsz_params p{hStream};
  return TRACE(cuStreamSynchronize_ptsz, p, CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  cuStreamQuery_params p{hStream};
  return TRACE(cuStreamQuery, p, CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  cuStreamWaitEvent_params p{hStream, hEvent, Flags};
  return TRACE(cuStreamWaitEvent, p, hEvent ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  cuStreamGetId_params p{hStream, streamId};
  return TRACE(cuStreamGetId, p, [&] {
    if (!streamId) return CUDA_ERROR_INVALID_VALUE;
    bool special = !hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD;
    *streamId = special ? 0 : hStream->id;
    return CUDA_SUCCESS;
  }());
}

// --- Events (wall clock) -------------------------------------------------------------
CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  cuEventCreate_params p{phEvent, Flags};
  return TRACE(cuEventCreate, p, [&] {
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    CUevent e = new CUevent_st();
    e->flags = Flags;
    *phEvent = e;
    return CUDA_SUCCESS;
  }());
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  cuEventRecord_params p{hEvent, hStream};
  return TRACE(cuEventRecord, p, doEventRecord(hEvent));
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  cuEventRecord_ptsz_params p{hEvent, hStream};
  return TRACE(cuEventRecord_ptsz, p, doEventRecord(hEvent));
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  cuEventRecordWithFlags_params p{hEvent, hStream, flags};
  return TRACE(cuEventRecordWithFlags, p, doEventRecord(hEvent));
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  cuEventSynchronize_params p{hEvent};
  return TRACE(cuEventSynchronize, p, hEvent ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  cuEventQuery_params p{hEvent};
  return TRACE(cuEventQuery, p, hEvent ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  cuEventElapsedTime_params p{pMilliseconds, hStart, hEnd};
  return TRACE(cuEventElapsedTime, p, doEventElapsed(pMilliseconds, hStart, hEnd));
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  cuEventElapsedTime_v2_params p{pMilliseconds, hStart, hEnd};
  return TRACE(cuEventElapsedTime_v2, p, doEventElapsed(pMilliseconds, hStart, hEnd));
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  cuEventDestroy_v2_params p{hEvent};
  return TRACE(cuEventDestroy_v2, p,
               hEvent ? (delete hEvent, CUDA_SUCCESS) : CUDA_ERROR_INVALID_HANDLE);
}

// --- Launches (kernels do nothing) -------------------------------------------------
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra) {
  cuLaunchKernel_params p{f,         gridDimX,       gridDimY, gridDimZ,     blockDimX, blockDimY,
                          blockDimZ, sharedMemBytes, hStream,  kernelParams, extra};
  return TRACE_SYM(cuLaunchKernel, p, symbolOf(f), launch(f));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  cuLaunchKernel_ptsz_params p{f,         gridDimX,     gridDimY,  gridDimZ,
                               blockDimX, blockDimY,    blockDimZ, sharedMemBytes,
                               hStream,   kernelParams, extra};
  return TRACE_SYM(cuLaunchKernel_ptsz, p, symbolOf(f), launch(f));
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  cuLaunchKernelEx_params p{config, f, kernelParams, extra};
  return TRACE_SYM(cuLaunchKernelEx, p, symbolOf(f), config ? launch(f) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                       void** kernelParams, void** extra) {
  cuLaunchKernelEx_ptsz_params p{config, f, kernelParams, extra};
  return TRACE_SYM(cuLaunchKernelEx_ptsz, p, symbolOf(f),
                   config ? launch(f) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams) {
  cuLaunchCooperativeKernel_params p{f,         gridDimX,  gridDimY,       gridDimZ, blockDimX,
                                     blockDimY, blockDimZ, sharedMemBytes, hStream,  kernelParams};
  return TRACE_SYM(cuLaunchCooperativeKernel, p, symbolOf(f), launch(f));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void** kernelParams) {
  cuLaunchCooperativeKernel_ptsz_params p{f,         gridDimX,    gridDimY,  gridDimZ,
                                          blockDimX, blockDimY,   blockDimZ, sharedMemBytes,
                                          hStream,   kernelParams};
  return TRACE_SYM(cuLaunchCooperativeKernel_ptsz, p, symbolOf(f), launch(f));
}

}  // extern "C"

// cudart_standin.cpp - CPU stand-in for the CUDA runtime (libcudart.so.13).
//
// A small runtime that lets programs built with `nvcc -cudart shared` run on
// a GPU-less machine.  It never touches memory or fires CUPTI callbacks on its
// own: every operation is forwarded to the stand-in driver (libcuda.so.1)
// through the ordinary driver API, so a profiler sees each allocation once, at
// the driver level, exactly as with the real stack.
//
// Besides the public cuda* functions it provides the hooks that nvcc's
// generated host code calls: __cudaRegisterFatBinary/End, __cudaRegister-
// Function (the mangled kernel name is kept and handed to cuLaunchKernel via
// the CUfunction, so the driver can report it as the CUPTI symbolName),
// __cudaRegisterVar/ManagedVar, __cudaInitModule, __cudaGetKernel,
// __cudaLaunchKernel and __cudaPush/PopCallConfiguration.
//
// Simplifications: __device__ and __managed__ variables get zero-filled host
// storage that does not count against device capacity (the real driver puts
// them in the module image, not through cuMemAlloc); kernels do nothing;
// everything is synchronous.  Errors are sticky per thread like the real
// runtime: the last failure is returned and cleared by cudaGetLastError.

#define __CUDA_API_VERSION_INTERNAL 1  // explicit _v2 driver names, no renaming
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "standin_internal.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

struct KernelRecord {
  CUfunc_st func;  // what the driver sees (name + host stub)
  std::string name;
};

struct VarRecord {
  void** module;
  void** hostVarPtrAddress;  // managed variables: where the host pointer lives
  size_t size;
  void* storage;
  bool managed;
};

struct Module {
  void* fatCubin;  // first member: the void** handle points here
  std::vector<VarRecord*> managedVars;
};

struct LaunchConfig {
  dim3 grid, block;
  size_t sharedMem;
  cudaStream_t stream;
};

std::mutex g_mu;  // guards the tables below; never held across a driver call
std::unordered_map<const void*, KernelRecord*> g_kernels;  // host stub -> kernel
std::unordered_set<const KernelRecord*> g_kernelRecords;
std::unordered_map<const void*, VarRecord*> g_vars;  // host shadow -> var
std::vector<CUcontext> g_primary;                    // per device
int g_deviceCount = 0;
CUresult g_initResult = CUDA_ERROR_NOT_INITIALIZED;
std::once_flag g_initOnce;

thread_local int t_device = 0;
thread_local CUcontext t_bound = nullptr;
thread_local cudaError_t t_lastError = cudaSuccess;
thread_local std::vector<LaunchConfig> t_configs;

cudaError_t toRuntime(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_LAUNCH_FAILED: return cudaErrorLaunchFailure;
    case CUDA_ERROR_ALREADY_MAPPED: return cudaErrorAlreadyMapped;
    case CUDA_ERROR_NOT_MAPPED: return cudaErrorNotMapped;
    default: return cudaErrorUnknown;
  }
}

// Records a failure as the thread's last error and passes it through.
cudaError_t note(cudaError_t e) {
  if (e != cudaSuccess) t_lastError = e;
  return e;
}
cudaError_t note(CUresult r) { return note(toRuntime(r)); }

cudaError_t ensureInit() {
  std::call_once(g_initOnce, [] {
    g_initResult = cuInit(0);
    if (g_initResult == CUDA_SUCCESS) {
      int n = 0;
      cuDeviceGetCount(&n);
      std::lock_guard<std::mutex> lock(g_mu);
      g_deviceCount = n;
      g_primary.assign(n, nullptr);
    }
  });
  if (g_initResult != CUDA_SUCCESS) return toRuntime(g_initResult);
  return g_deviceCount > 0 ? cudaSuccess : cudaErrorNoDevice;
}

// Makes the current device's primary context current on this thread.
cudaError_t ensureContext() {
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return e;
  int dev = t_device;
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ctx = g_primary[dev];
  }
  if (!ctx) {
    CUcontext fresh = nullptr;
    CUresult r = cuDevicePrimaryCtxRetain(&fresh, dev);
    if (r != CUDA_SUCCESS) return toRuntime(r);
    bool extra = false;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (!g_primary[dev])
        g_primary[dev] = fresh;
      else
        extra = true;
      ctx = g_primary[dev];
    }
    if (extra) cuDevicePrimaryCtxRelease_v2(dev);  // another thread won the race
  }
  if (t_bound != ctx) {
    CUresult r = cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) return toRuntime(r);
    t_bound = ctx;
  }
  return cudaSuccess;
}

// Runs a driver call after making sure a context is current.
#define WITH_CONTEXT(...)                             \
  do {                                                \
    cudaError_t ctxErr_ = ensureContext();            \
    if (ctxErr_ != cudaSuccess) return note(ctxErr_); \
    return note(__VA_ARGS__);                         \
  } while (0)

KernelRecord* findKernel(const void* func) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_kernels.find(func);
  if (it != g_kernels.end()) return it->second;
  auto* asRecord = static_cast<const KernelRecord*>(func);  // a cudaKernel_t handle
  if (g_kernelRecords.count(asRecord)) return const_cast<KernelRecord*>(asRecord);
  return nullptr;
}

VarRecord* findVar(const void* symbol) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_vars.find(symbol);
  if (it == g_vars.end()) return nullptr;
  VarRecord* v = it->second;
  if (!v->storage) v->storage = std::calloc(1, v->size ? v->size : 1);
  return v;
}

cudaError_t launch(const void* func, dim3 grid, dim3 block, void** args, size_t sharedMem,
                   cudaStream_t stream, bool ptsz) {
  cudaError_t e = ensureContext();
  if (e != cudaSuccess) return note(e);
  KernelRecord* k = findKernel(func);
  if (!k) return note(cudaErrorInvalidDeviceFunction);
  auto fn = ptsz ? cuLaunchKernel_ptsz : cuLaunchKernel;
  return note(fn(&k->func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                 (unsigned int)sharedMem, stream, args, nullptr));
}

cudaError_t launchEx(const cudaLaunchConfig_t* config, const void* func, void** args, bool ptsz) {
  if (!config) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureContext();
  if (e != cudaSuccess) return note(e);
  KernelRecord* k = findKernel(func);
  if (!k) return note(cudaErrorInvalidDeviceFunction);
  CUlaunchConfig c{};
  c.gridDimX = config->gridDim.x;
  c.gridDimY = config->gridDim.y;
  c.gridDimZ = config->gridDim.z;
  c.blockDimX = config->blockDim.x;
  c.blockDimY = config->blockDim.y;
  c.blockDimZ = config->blockDim.z;
  c.sharedMemBytes = (unsigned int)config->dynamicSmemBytes;
  c.hStream = config->stream;
  c.attrs = nullptr;  // launch attributes are not forwarded
  c.numAttrs = 0;
  auto fn = ptsz ? cuLaunchKernelEx_ptsz : cuLaunchKernelEx;
  return note(fn(&c, &k->func, args, nullptr));
}

CUresult copyByKind(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  auto d = reinterpret_cast<CUdeviceptr>(dst);
  auto s = reinterpret_cast<CUdeviceptr>(src);
  switch (kind) {
    case cudaMemcpyHostToDevice: return cuMemcpyHtoD_v2(d, src, count);
    case cudaMemcpyDeviceToHost: return cuMemcpyDtoH_v2(dst, s, count);
    case cudaMemcpyDeviceToDevice: return cuMemcpyDtoD_v2(d, s, count);
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: return cuMemcpy(d, s, count);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult copyByKindAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                         cudaStream_t st) {
  auto d = reinterpret_cast<CUdeviceptr>(dst);
  auto s = reinterpret_cast<CUdeviceptr>(src);
  switch (kind) {
    case cudaMemcpyHostToDevice: return cuMemcpyHtoDAsync_v2(d, src, count, st);
    case cudaMemcpyDeviceToHost: return cuMemcpyDtoHAsync_v2(dst, s, count, st);
    case cudaMemcpyDeviceToDevice: return cuMemcpyDtoDAsync_v2(d, s, count, st);
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: return cuMemcpyAsync(d, s, count, st);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUarray_format arrayFormat(const cudaChannelFormatDesc& d) {
  switch (d.f) {
    case cudaChannelFormatKindFloat: return d.x == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
    case cudaChannelFormatKindSigned:
      return d.x == 8    ? CU_AD_FORMAT_SIGNED_INT8
             : d.x == 16 ? CU_AD_FORMAT_SIGNED_INT16
                         : CU_AD_FORMAT_SIGNED_INT32;
    default:
      return d.x == 8    ? CU_AD_FORMAT_UNSIGNED_INT8
             : d.x == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
                         : CU_AD_FORMAT_UNSIGNED_INT32;
  }
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorContextIsDestroyed, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorAlreadyMapped, "cudaErrorAlreadyMapped", "resource already mapped"},
    {cudaErrorNotMapped, "cudaErrorNotMapped", "resource not mapped"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* findError(cudaError_t e) {
  for (const auto& x : kErrors)
    if (x.code == e) return &x;
  return nullptr;
}

int attr(CUdevice_attribute a, int dev) {
  int v = 0;
  cuDeviceGetAttribute(&v, a, dev);
  return v;
}

}  // namespace

extern "C" {

// ===========================================================================
// Hooks called by nvcc-generated host code
// ===========================================================================
void** __cudaRegisterFatBinary(void* fatCubin) {
  auto* m = new Module{fatCubin, {}};
  return reinterpret_cast<void**>(m);
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void**) {
  // Kernel and variable records stay valid until exit; nothing to release.
}

void __cudaRegisterFunction(void** /*fatCubinHandle*/, const char* hostFun, char* /*deviceFun*/,
                            const char* deviceName, int, uint3*, uint3*, dim3*, dim3*, int*) {
  auto* k = new KernelRecord();
  k->name = deviceName ? deviceName : "";
  k->func.name = k->name.c_str();
  k->func.hostFun = hostFun;
  std::lock_guard<std::mutex> lock(g_mu);
  g_kernels[hostFun] = k;
  g_kernelRecords.insert(k);
}

void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* /*deviceAddress*/,
                       const char* /*deviceName*/, int, size_t size, int, int) {
  auto* v = new VarRecord{fatCubinHandle, nullptr, size, nullptr, false};
  std::lock_guard<std::mutex> lock(g_mu);
  g_vars[hostVar] = v;
}

void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress,
                              char* /*deviceAddress*/, const char* /*deviceName*/, int, size_t size,
                              int, int) {
  auto* v = new VarRecord{fatCubinHandle, hostVarPtrAddress, size, nullptr, true};
  std::lock_guard<std::mutex> lock(g_mu);
  g_vars[hostVarPtrAddress] = v;
  reinterpret_cast<Module*>(fatCubinHandle)->managedVars.push_back(v);
}

void __cudaRegisterHostVar(void**, const char*, char*, size_t) {}
void __cudaRegisterTexture(void**, const void*, const void**, const char*, int, int, int) {}
void __cudaRegisterSurface(void**, const void*, const void**, const char*, int, int) {}

// Called on first host access to a __managed__ variable: give every managed
// variable of the module its storage.  Returns nonzero on success.
char __cudaInitModule(void** fatCubinHandle) {
  if (ensureContext() != cudaSuccess || !fatCubinHandle) return 0;
  std::lock_guard<std::mutex> lock(g_mu);
  for (VarRecord* v : reinterpret_cast<Module*>(fatCubinHandle)->managedVars) {
    if (!v->storage) v->storage = std::calloc(1, v->size ? v->size : 1);
    *v->hostVarPtrAddress = v->storage;
  }
  return 1;
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  t_configs.push_back(LaunchConfig{gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (t_configs.empty()) return cudaErrorMissingConfiguration;
  LaunchConfig c = t_configs.back();
  t_configs.pop_back();
  if (gridDim) *gridDim = c.grid;
  if (blockDim) *blockDim = c.block;
  if (sharedMem) *sharedMem = c.sharedMem;
  if (stream) *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  if (!kernel) return cudaErrorInvalidValue;
  KernelRecord* k = findKernel(hostFun);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) {
  return launch(kernel, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) {
  return launch(kernel, gridDim, blockDim, args, sharedMem, stream, true);
}

// ===========================================================================
// Launch
// ===========================================================================
cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) {
  return launch(func, gridDim, blockDim, args, sharedMem, stream, true);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return launchEx(config, func, args, false);
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  return launchEx(config, func, args, true);
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                        size_t sharedMem, cudaStream_t stream) {
  cudaError_t e = ensureContext();
  if (e != cudaSuccess) return note(e);
  KernelRecord* k = findKernel(func);
  if (!k) return note(cudaErrorInvalidDeviceFunction);
  return note(cuLaunchCooperativeKernel(&k->func, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
                                        blockDim.y, blockDim.z, (unsigned int)sharedMem, stream,
                                        args));
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr) return note(cudaErrorInvalidValue);
  if (!findKernel(func)) return note(cudaErrorInvalidDeviceFunction);
  std::memset(attr, 0, sizeof(*attr));  // a CPU stand-in kernel uses no resources
  attr->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute, int) {
  return findKernel(func) ? cudaSuccess : note(cudaErrorInvalidDeviceFunction);
}

// ===========================================================================
// Memory
// ===========================================================================
cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureContext();
  if (e != cudaSuccess) return note(e);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  return note(cuMemAlloc_v2(reinterpret_cast<CUdeviceptr*>(devPtr), size));
}

cudaError_t cudaFree(void* devPtr) {
  cudaError_t e = ensureContext();  // cudaFree(0) is the classic "initialize" idiom
  if (e != cudaSuccess) return note(e);
  if (!devPtr) return cudaSuccess;
  return note(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(devPtr)));
}

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (!devPtr || !pitch) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocPitch_v2(reinterpret_cast<CUdeviceptr*>(devPtr), pitch, width, height, 4));
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (!devPtr) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(devPtr), size, flags));
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (!devPtr) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocAsync(reinterpret_cast<CUdeviceptr*>(devPtr), size, stream));
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  if (!devPtr) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocAsync_ptsz(reinterpret_cast<CUdeviceptr*>(devPtr), size, stream));
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  WITH_CONTEXT(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(devPtr), stream));
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) {
  WITH_CONTEXT(cuMemFreeAsync_ptsz(reinterpret_cast<CUdeviceptr>(devPtr), stream));
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) {
  if (!ptr) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocFromPoolAsync(reinterpret_cast<CUdeviceptr*>(ptr), size,
                                       reinterpret_cast<CUmemoryPool>(memPool), stream));
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream) {
  if (!ptr) return note(cudaErrorInvalidValue);
  WITH_CONTEXT(cuMemAllocFromPoolAsync_ptsz(reinterpret_cast<CUdeviceptr*>(ptr), size,
                                            reinterpret_cast<CUmemoryPool>(memPool), stream));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  WITH_CONTEXT(cuDeviceGetDefaultMemPool(reinterpret_cast<CUmemoryPool*>(memPool), device));
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  if (!poolProps) return note(cudaErrorInvalidValue);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = poolProps->location.id;
  WITH_CONTEXT(cuMemPoolCreate(reinterpret_cast<CUmemoryPool*>(memPool), &props));
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  WITH_CONTEXT(cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(memPool)));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { WITH_CONTEXT(cuMemAllocHost_v2(ptr, size)); }

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  WITH_CONTEXT(cuMemHostAlloc(pHost, size, flags));
}

cudaError_t cudaFreeHost(void* ptr) { WITH_CONTEXT(cuMemFreeHost(ptr)); }

cudaError_t cudaMallocArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                            size_t width, size_t height, unsigned int /*flags*/) {
  if (!array || !desc) return note(cudaErrorInvalidValue);
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Format = arrayFormat(*desc);
  d.NumChannels = (desc->x > 0) + (desc->y > 0) + (desc->z > 0) + (desc->w > 0);
  if (d.NumChannels == 0) d.NumChannels = 1;
  WITH_CONTEXT(cuArrayCreate_v2(reinterpret_cast<CUarray*>(array), &d));
}

cudaError_t cudaFreeArray(cudaArray_t array) {
  if (!array) return cudaSuccess;
  WITH_CONTEXT(cuArrayDestroy(reinterpret_cast<CUarray>(array)));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  WITH_CONTEXT(copyByKind(dst, src, count, kind));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  WITH_CONTEXT(copyByKindAsync(dst, src, count, kind, stream));
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind /*kind*/) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(src);
  c.srcPitch = spitch;
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  c.dstPitch = dpitch;
  c.WidthInBytes = width;
  c.Height = height;
  WITH_CONTEXT(cuMemcpy2D_v2(&c));
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  WITH_CONTEXT(cuMemsetD8_v2(reinterpret_cast<CUdeviceptr>(devPtr), (unsigned char)value, count));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  WITH_CONTEXT(
      cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(devPtr), (unsigned char)value, count, stream));
}

cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  WITH_CONTEXT(cuMemsetD2D8_v2(reinterpret_cast<CUdeviceptr>(devPtr), pitch, (unsigned char)value,
                               width, height));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  WITH_CONTEXT(cuMemGetInfo_v2(free, total));
}

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (!devPtr) return note(cudaErrorInvalidValue);
  VarRecord* v = findVar(symbol);
  if (!v) return note(cudaErrorInvalidSymbol);
  *devPtr = v->storage;
  return cudaSuccess;
}

cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (!size) return note(cudaErrorInvalidValue);
  VarRecord* v = findVar(symbol);
  if (!v) return note(cudaErrorInvalidSymbol);
  *size = v->size;
  return cudaSuccess;
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind /*kind*/) {
  VarRecord* v = findVar(symbol);
  if (!v) return note(cudaErrorInvalidSymbol);
  if (offset + count > v->size) return note(cudaErrorInvalidValue);
  std::memcpy(static_cast<char*>(v->storage) + offset, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind /*kind*/) {
  VarRecord* v = findVar(symbol);
  if (!v) return note(cudaErrorInvalidSymbol);
  if (offset + count > v->size) return note(cudaErrorInvalidValue);
  std::memcpy(dst, static_cast<char*>(v->storage) + offset, count);
  return cudaSuccess;
}

// ===========================================================================
// Devices
// ===========================================================================
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureInit();
  *count = e == cudaSuccess ? g_deviceCount : 0;
  return note(e);
}

cudaError_t cudaSetDevice(int device) {
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  if (device < 0 || device >= g_deviceCount) return note(cudaErrorInvalidDevice);
  t_device = device;
  return note(ensureContext());
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  if (device < 0 || device >= g_deviceCount) return note(cudaErrorInvalidDevice);
  int saved = t_device;
  t_device = device;
  e = ensureContext();
  t_device = saved;
  return note(e);
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  return note(cuDevicePrimaryCtxSetFlags_v2(t_device, flags & ~cudaDeviceMapHost));
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  int active = 0;
  return note(cuDevicePrimaryCtxGetState(t_device, flags, &active));
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  if (device < 0 || device >= g_deviceCount) return note(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  cuDeviceGetName(prop->name, sizeof(prop->name), device);
  CUuuid uuid;
  cuDeviceGetUuid_v2(&uuid, device);
  std::memcpy(&prop->uuid, &uuid, sizeof(uuid));
  size_t total = 0;
  cuDeviceTotalMem_v2(&total, device);
  prop->totalGlobalMem = total;
  prop->sharedMemPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device);
  prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, device);
  prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
  prop->memPitch = attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, device);
  prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
  prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, device);
  prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, device);
  prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, device);
  prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, device);
  prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, device);
  prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, device);
  prop->totalConstMem = attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, device);
  prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  prop->textureAlignment = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
  prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
  prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, device);
  prop->pciDeviceID = device;
  prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, device);
  prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device);
  prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device);
  prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device);
  prop->maxThreadsPerMultiProcessor =
      attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device);
  prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, device);
  prop->sharedMemPerMultiprocessor =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, device);
  prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, device);
  prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device);
  prop->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device);
  prop->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device);
  prop->sharedMemPerBlockOptin =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
  prop->maxBlocksPerMultiProcessor =
      attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, device);
  prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return note(cudaErrorInvalidValue);
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  return note(cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), device));
}

cudaError_t cudaDeviceSynchronize(void) { WITH_CONTEXT(cuCtxSynchronize()); }

// Destroys the current device's primary context (and with it all its memory).
cudaError_t cudaDeviceReset(void) {
  cudaError_t e = ensureInit();
  if (e != cudaSuccess) return note(e);
  int dev = t_device;
  CUresult r = cuDevicePrimaryCtxReset_v2(dev);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_primary[dev] = nullptr;
  }
  t_bound = nullptr;
  return note(r);
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return note(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return note(cudaErrorInvalidValue);
  return note(cuDriverGetVersion(driverVersion));
}

// ===========================================================================
// Streams and events
// ===========================================================================
cudaError_t cudaStreamCreate(cudaStream_t* pStream) { WITH_CONTEXT(cuStreamCreate(pStream, 0)); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  WITH_CONTEXT(cuStreamCreate(pStream, flags));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  WITH_CONTEXT(cuStreamCreateWithPriority(pStream, flags, priority));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) { WITH_CONTEXT(cuStreamDestroy_v2(stream)); }

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  WITH_CONTEXT(cuStreamSynchronize(stream));
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  WITH_CONTEXT(cuStreamSynchronize_ptsz(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { WITH_CONTEXT(cuStreamQuery(stream)); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  WITH_CONTEXT(cuStreamWaitEvent(stream, event, flags));
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { WITH_CONTEXT(cuEventCreate(event, 0)); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  WITH_CONTEXT(cuEventCreate(event, flags));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  WITH_CONTEXT(cuEventRecord(event, stream));
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  WITH_CONTEXT(cuEventRecord_ptsz(event, stream));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { WITH_CONTEXT(cuEventSynchronize(event)); }

cudaError_t cudaEventQuery(cudaEvent_t event) { WITH_CONTEXT(cuEventQuery(event)); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  WITH_CONTEXT(cuEventElapsedTime_v2(ms, start, end));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) { WITH_CONTEXT(cuEventDestroy_v2(event)); }

struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                   enum cudaChannelFormatKind f) {
  struct cudaChannelFormatDesc d;
  d.x = x;
  d.y = y;
  d.z = z;
  d.w = w;
  d.f = f;
  return d;
}

// ===========================================================================
// Errors
// ===========================================================================
cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_lastError;
  t_lastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_lastError; }

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* e = findError(error);
  return e ? e->text : "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* e = findError(error);
  return e ? e->name : "cudaErrorUnknown";
}

}  // extern "C"

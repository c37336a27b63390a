// A probe of recording launches below CUPTI's callback cost, not part of vramtrace: a CUDA
// injection library (CUDA_INJECTION64_PATH) that watches cuGetProcAddress through CUPTI's
// callback and, at its exit, swaps the pointer handed out for cuLaunchKernel and
// cuLaunchKernelEx (and their per-thread-stream forms) for a wrapper that counts and calls
// the real one. It also counts the same launches through CUPTI's launch callbacks. At exit it
// prints both counts: equal counts mean that every launch of the program went through a
// pointer fetched after injection, where a wrapper could record it without CUPTI's dispatch.
//   CUDA_INJECTION64_PATH=build/lib/libvt_procaddress_probe.so PROGRAM
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <initializer_list>

namespace {

using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void**, void**);
using LaunchKernelEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

std::atomic<unsigned long> g_wrapped{0}, g_cupti_launches{0}, g_procaddress_calls{0};
std::atomic<unsigned long> g_swapped{0};
LaunchKernel g_real_lk[2] = {nullptr, nullptr};  // [0] default stream, [1] per-thread
LaunchKernelEx g_real_lkex[2] = {nullptr, nullptr};

template <int Slot>
CUresult wrap_lk(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                 unsigned bz, unsigned shm, CUstream s, void** params, void** extra) {
  g_wrapped.fetch_add(1, std::memory_order_relaxed);
  return g_real_lk[Slot](f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}
template <int Slot>
CUresult wrap_lkex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  g_wrapped.fetch_add(1, std::memory_order_relaxed);
  return g_real_lkex[Slot](c, f, params, extra);
}

void swap(cuGetProcAddress_v2_params* a) {
  if (!a->symbol || !a->pfn || !*a->pfn) return;
  const int slot = (a->flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
  if (strcmp(a->symbol, "cuLaunchKernel") == 0) {
    if (*a->pfn == reinterpret_cast<void*>(slot ? wrap_lk<1> : wrap_lk<0>)) return;
    g_real_lk[slot] = reinterpret_cast<LaunchKernel>(*a->pfn);
    *a->pfn = reinterpret_cast<void*>(slot ? wrap_lk<1> : wrap_lk<0>);
  } else if (strcmp(a->symbol, "cuLaunchKernelEx") == 0) {
    if (*a->pfn == reinterpret_cast<void*>(slot ? wrap_lkex<1> : wrap_lkex<0>)) return;
    g_real_lkex[slot] = reinterpret_cast<LaunchKernelEx>(*a->pfn);
    *a->pfn = reinterpret_cast<void*>(slot ? wrap_lkex<1> : wrap_lkex<0>);
  } else {
    return;
  }
  g_swapped.fetch_add(1);
  fprintf(stderr, "procaddress_probe: swapped %s (flags %llu, version %d)\n", a->symbol,
          static_cast<unsigned long long>(a->flags), a->cudaVersion);
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                          const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2:
      if (cb->callbackSite == CUPTI_API_EXIT) {
        g_procaddress_calls.fetch_add(1);
        swap(static_cast<cuGetProcAddress_v2_params*>(const_cast<void*>(cb->functionParams)));
      }
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      if (cb->callbackSite == CUPTI_API_ENTER) g_cupti_launches.fetch_add(1);
      break;
    default: break;
  }
}

__attribute__((destructor)) void report() {
  fprintf(stderr,
          "procaddress_probe: cuGetProcAddress_v2 calls seen %lu, pointers swapped %lu; "
          "launches: CUPTI %lu, through swapped pointers %lu\n",
          g_procaddress_calls.load(), g_swapped.load(), g_cupti_launches.load(), g_wrapped.load());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("/usr/local/cuda/lib64/libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "procaddress_probe: libcupti.so.13 not found\n");
    return 1;
  }
  using Subscribe = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  using Enable =
      CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
  auto subscribe = reinterpret_cast<Subscribe>(dlsym(lib, "cuptiSubscribe"));
  auto enable = reinterpret_cast<Enable>(dlsym(lib, "cuptiEnableCallback"));
  CUpti_SubscriberHandle subscriber = nullptr;
  if (!subscribe || !enable || subscribe(&subscriber, on_callback, nullptr) != CUPTI_SUCCESS) {
    fprintf(stderr, "procaddress_probe: cannot subscribe to CUPTI\n");
    return 1;
  }
  for (CUpti_CallbackId id :
       {CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz})
    enable(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  fprintf(stderr, "procaddress_probe: injected\n");
  return 1;
}

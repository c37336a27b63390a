// CUPTI's floor, for bench/gpu.sh: a CUDA injection library (CUDA_INJECTION64_PATH)
// that subscribes to CUPTI and enables exactly the driver callbacks vramtrace enables, with a
// callback that does nothing. A program run with it pays what CUPTI's dispatch costs and
// nothing of vramtrace's own work, so (vramtrace - floor) is what vramtrace itself adds.
//   CUDA_INJECTION64_PATH=build/lib/libvt_cupti_floor.so PROGRAM
// vt_cupti_floor_enable(0 or 1), found with dlopen/dlsym (ctypes), turns the driver callbacks
// off and on inside the process, for the in-process comparison of bench/gpu_torch.py
// launch_bound_ab.
// VRAMTRACE_LAUNCHES=off leaves the launch ids out, as it does in vramtrace.
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "interpose/driver_callbacks.h"
#include "interpose/options.h"

namespace {

using Enable = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                               CUpti_CallbackId);
CUpti_SubscriberHandle g_subscriber = nullptr;
Enable g_enable = nullptr;
bool g_launches = true;

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("/usr/local/cuda/lib64/libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "cupti_floor: libcupti.so.13 not found\n");
    return 1;
  }
  using Subscribe = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  auto subscribe = reinterpret_cast<Subscribe>(dlsym(lib, "cuptiSubscribe"));
  auto enable = g_enable = reinterpret_cast<Enable>(dlsym(lib, "cuptiEnableCallback"));
  CUpti_SubscriberHandle& subscriber = g_subscriber;
  if (!subscribe || !enable || subscribe(&subscriber, on_callback, nullptr) != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti_floor: cannot subscribe to CUPTI\n");
    return 1;
  }
  bool bad = false;
  g_launches = vramtrace::interpose::launches_recorded(getenv("VRAMTRACE_LAUNCHES"), &bad);
  vramtrace::interpose::enable_driver_callbacks(g_enable, g_subscriber, 1, g_launches);
  enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
  enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  return 1;
}

extern "C" __attribute__((visibility("default"))) int vt_cupti_floor_enable(int on) {
  if (!g_subscriber || !g_enable) return 0;
  return vramtrace::interpose::enable_driver_callbacks(g_enable, g_subscriber, on ? 1 : 0,
                                                       g_launches);
}

// standin_internal.h - private contract between the three stand-in libraries.
//
// The stand-in libcuda.so.1 owns all state (devices, contexts, memory, the
// CUPTI subscriber).  The stand-in libcudart.so.13 and libcupti.so.13 talk to
// it only through the real driver API plus the few vramtrace_standin_* entry
// points declared here.  CUfunc_st is defined here so the runtime can hand the
// driver a CUfunction that carries the kernel's registered (mangled) name,
// which the driver reports as CUpti_CallbackData::symbolName for launches.
#pragma once

#include <cuda.h>
#include <cupti_callbacks.h>

// A "function handle" as created by the stand-in runtime for each kernel
// registered through __cudaRegisterFunction.
struct CUfunc_st {
  const char* name;     // mangled device function name
  const void* hostFun;  // host stub address used as the runtime-side key
};

extern "C" {
// Install (or, with callback == nullptr, remove) the single CUPTI subscriber.
void vramtrace_standin_set_subscriber(CUpti_CallbackFunc callback, void* userdata);
// Enable/disable one callback; cbid < 0 means every cbid in the domain;
// domain <= 0 means every domain.
void vramtrace_standin_enable(int enable, int domain, int cbid);
// 1 if (domain, cbid) is enabled, 0 if not, -1 if out of range.
int vramtrace_standin_is_enabled(int domain, int cbid);
}

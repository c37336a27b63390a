// CUPTI loading and subscription: finds libcupti.so.13, subscribes on_callback (hot_path.cpp)
// and enables the driver callbacks it traces (driver_callbacks.h) and the context callbacks.
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

#include "common/format.h"
#include "interpose/driver_callbacks.h"
#include "interpose/emit.h"
#include "interpose/hooks.h"
#include "interpose/hot_path.h"
#include "interpose/notice.h"
#include "interpose/recorder.h"

#ifndef VRAMTRACE_CUPTI_DIR
#define VRAMTRACE_CUPTI_DIR "/usr/local/cuda/lib64"
#endif

namespace vramtrace::interpose {
namespace {

namespace rec = format::rec;

// ---- the few CUPTI functions we call, found at run time --------------------------------------

struct Cupti {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                              CUpti_SubscriberParams*) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

Cupti g_cupti;
CUpti_SubscriberHandle g_subscriber = nullptr;

template <typename F>
void resolve(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

// The folders of NVIDIA's pip wheels (the ones PyTorch depends on) that hold CUPTI, under a
// site-packages: CUDA 13's layout, then the older one. The only list of them: the Python
// package's command names its Python's folders (VRAMTRACE_SITE_PACKAGES) instead of looking.
constexpr const char* kWheelDirs[] = {"nvidia/cu13/lib", "nvidia/cuda_cupti/lib"};

// CUPTI from a wheel under the folder of `len` bytes at `dir`, or nullptr.
void* open_wheel_cupti(const char* dir, int len) {
  char path[1024];
  for (const char* rel : kWheelDirs) {
    snprintf(path, sizeof path, "%.*s/%s/libcupti.so.13", len, dir, rel);
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

// `env`: VRAMTRACE_CUPTI, tried first; `site_packages`: VRAMTRACE_SITE_PACKAGES, tried last.
void* open_cupti(const char* env, const char* site_packages) {
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
  // Installed with pip (site-packages/vramtrace/_bin/libvramtrace.so): the wheels' CUPTI in the
  // same site-packages, for machines with a driver but no CUDA Toolkit.
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&open_cupti), &self) && self.dli_fname) {
    const char* slash = strrchr(self.dli_fname, '/');
    const int dir_len = slash ? static_cast<int>(slash - self.dli_fname) : 0;
    snprintf(path, sizeof path, "%.*s/../..", dir_len, self.dli_fname);
    if (void* h = open_wheel_cupti(path, static_cast<int>(strnlen(path, sizeof path)))) return h;
  }
  // Then in every folder of the Python that ran the package's command (another site-packages,
  // a virtual environment's, the user's).
  for (const char* p = site_packages; p && *p;) {
    const char* colon = strchr(p, ':');
    const int len = colon ? static_cast<int>(colon - p) : static_cast<int>(strlen(p));
    if (len > 0) {
      if (void* h = open_wheel_cupti(p, len)) return h;
    }
    p = colon ? colon + 1 : nullptr;
  }
  return nullptr;
}

char g_cupti_path[1024];  // the file CUPTI was loaded from, for vramtrace_v1_cupti_path

void remember_cupti_path(void* handle) {
  link_map* map = nullptr;
  if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
    snprintf(g_cupti_path, sizeof g_cupti_path, "%s", map->l_name);
}

void record_notice(const char* text) {
  size_t n = strnlen(text, 1024);
  RecordSlot slot(16 + n);
  if (!slot.ok()) return;
  slot.commit(format::put(slot.begin(), rec::Notice{{text, n}}));
}

// Whether the launch ids are enabled (VRAMTRACE_LAUNCHES); with launches off they never are, and
// once stopped (vramtrace_v1_stop_launches) they are not again.
std::atomic<bool> g_launches{true};

// Says why this process is not profiled, on stderr and (when the output is open) in the trace.
void give_up(const char* why) {
  notice(why);
  record_notice(why);
}

}  // namespace

bool subscribe_cupti(bool launches, const char* cupti_path, const char* site_packages) {
  find_driver_functions();

  void* lib = open_cupti(cupti_path, site_packages);
  if (!lib) {
    give_up(
        "CUPTI (libcupti.so.13) not found; this process runs without memory profiling "
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
      snprintf(why, sizeof why,
               "cannot subscribe to CUPTI (%s); this process runs without "
               "memory profiling",
               msg);
    }
    give_up(why);
    return false;
  }
  g_launches = launches;
  enable_driver_callbacks(g_cupti.enable_callback, g_subscriber, 1, launches);
  g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                          CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
  g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                          CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  return true;
}

#ifdef VRAMTRACE_SELF_TIME
// Benchmark build only: turns our driver callbacks off and on again inside one process, so
// that bench/gpu_torch.py (launch_bound_ab) can compare steps with and without them in
// the same process (process-to-process spread on the GPU machine is larger than the effect).
extern "C" __attribute__((visibility("default"))) int vramtrace_bench_enable_callbacks(int on) {
  if (!g_subscriber || !g_cupti.enable_callback) return 0;
  return enable_driver_callbacks(g_cupti.enable_callback, g_subscriber, on ? 1 : 0,
                                 g_launches.load());
}
// The launch callbacks alone (bench/gpu_ab.py's `launches` arm: what the default saves in a
// PyTorch process by stopping them).
extern "C" __attribute__((visibility("default"))) int vramtrace_bench_enable_launch_callbacks(
    int on) {
  if (!g_subscriber || !g_cupti.enable_callback) return 0;
  return enable_launch_callbacks(g_cupti.enable_callback, g_subscriber, on ? 1 : 0);
}
#endif

}  // namespace vramtrace::interpose

// Kernel launches stop being recorded from now on, for `reason` (format::StopReason): their
// CUPTI ids are disabled, so that a launch costs CUPTI and vramtrace nothing more, and a
// LaunchesStopped record tells the collector that what follows is not recorded rather than
// absent. Returns 1 when it stopped them; 0 when they were not being recorded (launches off,
// already stopped, CUDA not started in this process, CUPTI not ours), which changes nothing.
extern "C" __attribute__((visibility("default"))) int vramtrace_v1_stop_launches(unsigned reason) {
  using namespace vramtrace::interpose;
  ReentryGuard guard;
  if (!guard.entered_first || !g_subscriber || !g_cupti.enable_callback) return 0;
  if (!g_launches.exchange(false)) return 0;
  // Recorded first: a launch that another thread records while the ids go off lands after it,
  // where the collector no longer counts it.
  emit(vramtrace::format::rec::LaunchesStopped{reason});
  enable_launch_callbacks(g_cupti.enable_callback, g_subscriber, 0);
  return 1;
}

// The file CUPTI was loaded from ("" before CUDA started, or when it could not be loaded).
extern "C" __attribute__((visibility("default"))) const char* vramtrace_v1_cupti_path() {
  return vramtrace::interpose::g_cupti_path;
}

// callback_probe.cpp - tiny CUPTI injection used by the stand-in smoke test.
//
// Loaded by the (stand-in) driver through CUDA_INJECTION64_PATH.  Subscribes
// with cuptiSubscribe, enables cuMemAlloc_v2, cuMemFree_v2, cuLaunchKernel and
// the context-created resource callback, and at exit prints what it saw, e.g.
//   probe: alloc=3 free=1 launch=1 ctx=1
// followed by the allocation sizes (read from the params at the exit site),
// failed allocations, context destructions, the kernel symbolName and the
// free memory reported by cuMemGetInfo_v2 when called from inside a callback
// (checks that re-entering the driver works).  If CUPTI is held by another
// tool it retries with cuptiSubscribe_v2 to learn the holder's name and
// prints "probe: cupti busy, held by NAME".
#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex g_mu;
int g_alloc = 0, g_allocFailed = 0, g_free = 0, g_launch = 0, g_ctx = 0, g_ctxDestroy = 0;
std::vector<size_t> g_sizes;
std::string g_symbol;
size_t g_freeSeen = 0;
CUpti_SubscriberHandle g_subscriber;

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_ctx;
    return;
  }
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_ctxDestroy;
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_EXIT) return;
  CUresult result = *static_cast<CUresult*>(cb->functionReturnValue);
  if (result != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) ++g_allocFailed;
    return;
  }
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) {
    auto* p = static_cast<const cuMemAlloc_v2_params*>(cb->functionParams);
    size_t freeBytes = 0, total = 0;
    cuMemGetInfo_v2(&freeBytes, &total);  // re-enter the driver from a callback
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_alloc;
    g_sizes.push_back(p->bytesize);
    g_freeSeen = freeBytes;
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_free;
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_launch;
    g_symbol = cb->symbolName ? cb->symbolName : "(null)";
  }
}

void report() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "probe: alloc=%d free=%d launch=%d ctx=%d\n", g_alloc, g_free, g_launch,
               g_ctx);
  std::fprintf(stderr, "probe: sizes=");
  for (size_t i = 0; i < g_sizes.size(); ++i)
    std::fprintf(stderr, "%s%zu", i ? "," : "", g_sizes[i]);
  std::fprintf(stderr, "\nprobe: alloc_failed=%d ctx_destroy=%d\n", g_allocFailed, g_ctxDestroy);
  std::fprintf(stderr, "probe: symbol=%s\nprobe: free_in_callback=%zu\n", g_symbol.c_str(),
               g_freeSeen);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  CUptiResult r = cuptiSubscribe(&g_subscriber, onCallback, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    char holder[64] = "";
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "callback_probe";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof(holder);
    r = cuptiSubscribe_v2(&g_subscriber, onCallback, nullptr, &params);
    std::fprintf(stderr, "probe: cupti busy, held by %s\n", holder);
    return 0;
  }
  if (r != CUPTI_SUCCESS) {
    const char* s = "?";
    cuptiGetResultString(r, &s);
    std::fprintf(stderr, "probe: cuptiSubscribe failed: %s\n", s);
    return 0;
  }
  cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                      CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
  cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                      CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2);
  cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                      CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
  cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                      CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  std::atexit(report);
  return 1;
}

// driver_check.cpp - driver-level checks for the stand-in libcuda.so.1.
//
// Linked directly against the stand-in libcuda.so.1 and libcupti.so.13.
// Checks: CUDA_ERROR_NOT_INITIALIZED before cuInit, capacity accounting for
// VMM (cuMemCreate counts until released AND unmapped), mapped VMM memory is
// usable, cuMemGetInfo, contexts get increasing uids, callbacks carry the
// *_params struct and the context, and driver calls made from inside a
// callback do not fire nested callbacks.  Prints "driver_check ok".
#include <cuda.h>
#include <cupti.h>

#include <cstdio>
#include <cstring>

#define EXPECT(cond)                                                                  \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "driver_check: failed: %s at line %d\n", #cond, __LINE__); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

static int g_enter = 0, g_exit = 0, g_nested = 0, g_memCreate = 0;
static size_t g_lastCreateSize = 0;
static bool g_inside = false;

static void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (g_inside) ++g_nested;  // must never happen
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER)
    ++g_enter;
  else
    ++g_exit;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemCreate && cb->callbackSite == CUPTI_API_EXIT) {
    ++g_memCreate;
    g_lastCreateSize = static_cast<const cuMemCreate_params*>(cb->functionParams)->size;
    if (!cb->context || cb->contextUid == 0 || std::strcmp(cb->functionName, "cuMemCreate") != 0)
      g_nested += 100;
  }
  g_inside = true;
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);  // enabled cbid, but nested: no callback expected
  g_inside = false;
}

int main() {
  size_t f = 0, t = 0;
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_ERROR_NOT_INITIALIZED);
  EXPECT(cuInit(0) == CUDA_SUCCESS);

  CUpti_SubscriberHandle sub;
  EXPECT(cuptiSubscribe(&sub, onCallback, nullptr) == CUPTI_SUCCESS);
  CUpti_SubscriberHandle second;
  EXPECT(cuptiSubscribe(&second, onCallback, nullptr) ==
         CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS);
  uint32_t state = 0;
  EXPECT(cuptiGetCallbackState(&state, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                               CUPTI_DRIVER_TRACE_CBID_cuMemCreate) == CUPTI_SUCCESS &&
         state == 1);

  CUcontext primary = nullptr, other = nullptr;
  EXPECT(cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
  EXPECT(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  unsigned long long id1 = 0, id2 = 0;
  EXPECT(cuCtxGetId(primary, &id1) == CUDA_SUCCESS);
  EXPECT(cuCtxCreate_v4(&other, nullptr, 0, 0) == CUDA_SUCCESS);
  EXPECT(cuCtxGetId(other, &id2) == CUDA_SUCCESS && id2 > id1);
  EXPECT(cuCtxDestroy_v2(other) == CUDA_SUCCESS);
  EXPECT(cuCtxSetCurrent(primary) == CUDA_SUCCESS);

  size_t free0 = 0;
  EXPECT(cuMemGetInfo_v2(&free0, &t) == CUDA_SUCCESS && free0 == t);

  // VMM: reserve, create, map, use, then release/unmap in either order.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  EXPECT(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
         CUDA_SUCCESS);
  EXPECT(gran == (2u << 20));
  CUdeviceptr va = 0;
  EXPECT(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0) == CUDA_SUCCESS && va != 0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT(cuMemCreate(&h, 2 * gran, &prop, 0) == CUDA_SUCCESS);
  EXPECT(g_memCreate == 1 && g_lastCreateSize == 2 * gran);
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && free0 - f == 2 * gran);
  EXPECT(cuMemMap(va, 2 * gran, 0, h, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT(cuMemSetAccess(va, 2 * gran, &access, 1) == CUDA_SUCCESS);
  EXPECT(cuMemsetD32_v2(va, 0xabcdef01u, (2 * gran) / 4) == CUDA_SUCCESS);
  EXPECT(reinterpret_cast<unsigned*>(va)[1000] == 0xabcdef01u);
  EXPECT(cuMemRelease(h) == CUDA_SUCCESS);
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && free0 - f == 2 * gran);  // still mapped
  EXPECT(cuMemUnmap(va, 2 * gran) == CUDA_SUCCESS);
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == free0);
  EXPECT(cuMemAddressFree(va, 4 * gran) == CUDA_SUCCESS);

  // Unknown pointer frees are rejected; pinned host memory is not counted.
  EXPECT(cuMemFree_v2(0x1234) == CUDA_ERROR_INVALID_VALUE);
  void* pinned = nullptr;
  EXPECT(cuMemAllocHost_v2(&pinned, 8 << 20) == CUDA_SUCCESS);
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == free0);
  EXPECT(cuMemFreeHost(pinned) == CUDA_SUCCESS);

  EXPECT(g_nested == 0);
  EXPECT(g_enter > 0 && g_enter == g_exit);
  EXPECT(cuptiUnsubscribe(sub) == CUPTI_SUCCESS);
  int before = g_enter;
  EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS);
  EXPECT(g_enter == before);  // no subscriber, no callbacks
  std::printf("driver_check ok (%d callback pairs)\n", g_enter);
  return 0;
}

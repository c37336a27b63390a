// The driver API callbacks vramtrace enables, by CUPTI id: allocation and free calls, always;
// kernel launches, unless launches are off (VRAMTRACE_LAUNCHES=off). CUPTI calls a subscriber at
// both sites of every enabled id, so with launches off the launch ids are not enabled at all,
// rather than enabled and ignored.
// Shared with bench/cupti_floor.cpp, which enables the same ones with an empty callback to
// measure what CUPTI's dispatch alone costs.
#pragma once

#include <cupti.h>

namespace vramtrace::interpose {

// Allocations and frees: always enabled.
inline constexpr CUpti_CallbackId kMemoryCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
};

// Kernel and graph launches: enabled unless launches are off.
inline constexpr CUpti_CallbackId kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

// Calls cuptiEnableCallback (`enable`, however the caller loaded it) with `on` (1 or 0) for each
// launch id above. Returns how many of the calls succeeded.
template <typename EnableCallback>
int enable_launch_callbacks(EnableCallback enable, CUpti_SubscriberHandle subscriber, uint32_t on) {
  int done = 0;
  for (CUpti_CallbackId id : kLaunchCallbacks)
    done += enable(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) == CUPTI_SUCCESS;
  return done;
}

// The same for each driver id above: the memory ids, and the launch ids when `launches`.
template <typename EnableCallback>
int enable_driver_callbacks(EnableCallback enable, CUpti_SubscriberHandle subscriber, uint32_t on,
                            bool launches) {
  int done = 0;
  for (CUpti_CallbackId id : kMemoryCallbacks)
    done += enable(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) == CUPTI_SUCCESS;
  if (launches) done += enable_launch_callbacks(enable, subscriber, on);
  return done;
}

}  // namespace vramtrace::interpose

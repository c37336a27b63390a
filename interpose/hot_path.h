// What cupti_hooks.cpp hands to CUPTI from the hot path (hot_path.cpp): the callback it
// subscribes, and the driver functions that callback calls, found once before subscribing.
#pragma once

#include <cupti.h>

namespace vramtrace::interpose {

// Finds the driver's functions the callback calls (device of a context, device name and memory,
// pool attributes) in the libcuda.so.1 already loaded.
void find_driver_functions();

// CUPTI's callback: driver API calls (allocations, frees, launches) and context creation and
// destruction become records.
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data);

}  // namespace vramtrace::interpose

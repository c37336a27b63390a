// The CUPTI side of the preloaded library: subscribe once, enable the callbacks we trace.
#pragma once

namespace vramtrace::interpose {

// Loads CUPTI, subscribes and enables the driver and resource callbacks. Returns false (after
// one notice on stderr and a Notice record) when this process cannot be profiled.
bool subscribe_cupti();

}  // namespace vramtrace::interpose

// The CUPTI side of the preloaded library: subscribe once, enable the callbacks we trace.
#pragma once

#include <cstdint>

#include "common/format.h"

namespace vramtrace::interpose {

// Loads CUPTI (`cupti_path`, VRAMTRACE_CUPTI, first when set; the pip wheels' CUPTI under the
// folders of `site_packages`, VRAMTRACE_SITE_PACKAGES, last), subscribes and enables the driver
// and resource callbacks: the launch callbacks only when `launches` (VRAMTRACE_LAUNCHES).
// Returns false (after one notice on stderr and a Notice record) when this process cannot be
// profiled.
bool subscribe_cupti(bool launches, const char* cupti_path, const char* site_packages);

}  // namespace vramtrace::interpose

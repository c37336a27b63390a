// One allocation as the collector keeps it: a driver allocation, or a block a sub-allocator
// handed out (collector/model/allocator_view.h).
#pragma once

#include <cstdint>

#include "common/format.h"

namespace vramtrace::collector {

struct Allocation {
  uint64_t id = 0;    // device address, array handle or VMM handle
  uint8_t space = 0;  // 0: a driver allocation; 1: a block a sub-allocator pool handed out
  format::Api api = format::Api::Unknown;
  uint32_t device = 0;
  uint64_t bytes = 0;
  uint64_t time_ns = 0;
  uint64_t seq = 0;  // order of its event among all events of the run (all processes merged)
  uint64_t stream = 0;
  uint32_t thread = 0;
  uint32_t last_kernel = 0;  // name id of the kernel launched last before it on its device
  uint32_t stack = 0;        // leaf of its native stack in the process's trace tree (0: none)
  uint32_t py_stack = 0;     // leaf of its Python stack (0: none)
  uint32_t phase = 0;        // name id of the innermost NVTX range open on its thread (0: none)
  uint32_t process = 0;      // index of its process in Run::processes
};

}  // namespace vramtrace::collector

// Stacks at each allocation: captured on the allocating thread, interned as a trace tree.
//
// capture_stack() runs outside the recorder's lock (unwinding takes the loader's lock and costs
// microseconds); write_stack() runs inside the RecordSlot of the allocation record, so that the
// new tree nodes, the AllocStack record and the allocation itself land together and in order.
// Nothing here allocates from the general heap or does I/O: the intern tables are mmap'd once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramtrace::interpose {

inline constexpr int kMaxStackDepth =
    128;  // the most VRAMTRACE_MAX_DEPTH may ask for (6 KiB of stack)

struct PyFrameRef {
  uint64_t code_hash;  // of file and function name: interning does not trust object addresses
  const char* file;    // UTF-8 owned by the code object, alive while the frame runs
  const char* function;
  uint32_t file_len, function_len;
  uint32_t line;
};

struct CapturedStack {
  int depth = 0;     // native frames, leaf first
  int py_depth = 0;  // Python frames, innermost first
  uintptr_t ips[kMaxStackDepth];
  PyFrameRef py[kMaxStackDepth];
};

// Takes the stack options (VRAMTRACE_STACKS, VRAMTRACE_MAX_DEPTH,
// VRAMTRACE_ASYNC_STACK_MIN_BYTES: see options.h; the default mode is auto) and maps the intern
// tables. Called once, before CUPTI is subscribed.
struct StackOptions;
void stacks_init(const StackOptions& options);
bool stacks_enabled();

// Whether an allocation of `bytes` through a stream-ordered pool gets a stack. In the default
// mode ("auto") those per-tensor allocations (PyTorch's backend:cudaMallocAsync makes one per
// tensor) get one only when they fail or are at least VRAMTRACE_ASYNC_STACK_MIN_BYTES (default
// 64 MiB): unwinding a deep framework stack costs microseconds, thousands of times a step.
// `all` gives every allocation a stack.
bool async_stack_wanted(uint64_t bytes, bool failed);

// Fills `s` for the calling thread (s->depth == s->py_depth == 0 when stacks are off). Sends
// the module map first when modules were loaded or unloaded since it was last sent.
void capture_stack(CapturedStack* s);

// The most bytes write_stack() may write for `s`.
size_t stack_record_bytes(const CapturedStack& s);

// Caller holds a RecordSlot with room for stack_record_bytes(s): writes the tree nodes not yet
// sent, then the AllocStack record. Adds the number of records written to *records.
uint8_t* write_stack(uint8_t* p, const CapturedStack& s, uint32_t* records);

// Sends the module map (at start; capture_stack() resends it when it changed).
void send_module_map();

}  // namespace vramtrace::interpose

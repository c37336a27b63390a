// Live figures kept inside the traced process, for the Python API and the pytest plugin
// (vramtrace_v1_live_* in vramtrace.h): device bytes live now and their peak, what sub-allocator
// pools only cache, and the allocation sites that hold memory, per device.
//
// The trace itself does not need any of this (the collector rebuilds everything from events);
// these tables exist so that a process can ask about itself while it runs. They have their own
// lock, separate from the recorder's: one hash-table update per allocation and free, next to a
// CUPTI callback that costs far more.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramtrace::interpose {

struct CapturedStack;

// What a tracked item is: a driver allocation (address or array handle), a VMM physical
// allocation (cuMemCreate handle) or a block of a vramtrace.h pool.
enum class LiveKind : uint8_t { Driver = 0, Vmm = 1, Block = 2 };

void live_alloc(LiveKind kind, int device, uint64_t id, uint64_t bytes, const CapturedStack& stack,
                uint64_t pool = 0);
void live_free(LiveKind kind, uint64_t id, uint64_t pool = 0);
void live_pool(uint64_t pool, int device);
// A pool's segment added (add=true) or removed: what it holds but has not handed out as blocks
// is cached, not in use.
void live_segment(uint64_t pool, uint64_t base, uint64_t bytes, bool add);

}  // namespace vramtrace::interpose

// The CUPTI side of the preloaded library: subscribe once, enable the callbacks we trace.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "common/format.h"

namespace vramtrace::interpose {

struct CapturedStack;

// A record of fixed fields that starts with its time (`fields` are the ones after it), with the
// stack's tree nodes and AllocStack before it when `stack` holds frames. False when dropped.
bool emit_with_stack(format::RecordType type, const CapturedStack& stack,
                     std::initializer_list<uint64_t> fields);
void emit(format::RecordType type, std::initializer_list<uint64_t> fields);

// A fresh id for a String record (kernel, range and pool names share one id space). Call only
// inside a RecordSlot: the recorder's lock guards the counter.
uint32_t allocate_string_id();

// Loads CUPTI, subscribes and enables the driver and resource callbacks: the launch callbacks
// only when `launches` (VRAMTRACE_LAUNCHES). Returns false (after one notice on stderr and a
// Notice record) when this process cannot be profiled.
bool subscribe_cupti(bool launches);

}  // namespace vramtrace::interpose

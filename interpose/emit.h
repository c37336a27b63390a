// Writing one record into the recorder's buffer: the records of common/records.h, each in its
// own RecordSlot (taken under the recorder's lock), with the allocating thread's stack before it
// when it has one. The hot path of every hook ends here.
// The whole hot path, from CUPTI's callback to here, is mapped at the top of hot_path.cpp.
#pragma once

#include <cstdint>

#include "common/records.h"
#include "interpose/recorder.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {

// A record without text: timed records take the slot's time delta, untimed ones take none (a
// slot whose record has no time must not move the frame's clock: see RecordSlot::delta_ns).
template <typename R>
void emit(const R& r) {
  static_assert(!format::has_text<R>(), "a record with text sizes its own slot");
  RecordSlot slot(format::kMaxFixedRecordBytes);
  if (!slot.ok()) return;
  if constexpr (R::kTimed)
    slot.commit(format::put(slot.begin(), r, slot.delta_ns()));
  else
    slot.commit(format::put(slot.begin(), r));
}

// A timed record with the stack of the allocation it records: the tree nodes the stack adds and
// an AllocStack naming its leaves go first, in the same slot (the stack is captured before the
// slot is taken: unwinding is the slow part). False when the record was dropped.
template <typename R>
bool emit_with_stack(const R& r, const CapturedStack& stack) {
  static_assert(R::kTimed && !format::has_text<R>());
  const bool with_stack = stack.depth || stack.py_depth;
  RecordSlot slot(format::kMaxFixedRecordBytes + (with_stack ? stack_record_bytes(stack) : 0));
  if (!slot.ok()) return false;
  uint8_t* p = slot.begin();
  uint32_t records = 1;
  if (with_stack) p = write_stack(p, stack, &records);
  p = format::put(p, r, slot.delta_ns());
  slot.commit(p, records);
  return true;
}

}  // namespace vramtrace::interpose

// What the traced program says about itself: NVTX ranges (vramtrace is the process's NVTX
// injection library: preload.cpp points NVTX_INJECTION64_PATH here) and the vramtrace.h calls
// (a sub-allocator's pools, segments, blocks and OOMs; iteration steps).
//
// Range and pool names are interned by content (the program's strings are transient) into the
// same String id space as kernel names. Everything runs on the calling thread under the
// recorder's lock, like the CUDA hooks; nothing is recorded before CUDA starts the recorder.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstring>

#include "common/format.h"
#include "interpose/emit.h"
#include "interpose/intern.h"
#include "interpose/live.h"
#include "interpose/recorder.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {
namespace {

namespace rec = format::rec;

constexpr size_t kMaxRangeName = 512;

// Names by content: the program's strings are transient, so a name is known by its FNV-1a hash
// alone (never 0: 0 marks an empty slot), which also places it.
struct NameSlot {
  uint64_t hash;
  uint32_t id;
  bool same_key(const NameSlot& o) const { return hash == o.hash; }
};
uint64_t name_slot_hash(const NameSlot& n) { return n.hash; }
InternTable<NameSlot, name_slot_hash, 4096, InternStorage::kStatic, InternFull::kEverySlot> g_names;

// The id of `name`; writes its String record first when it is new. Inside a RecordSlot.
uint8_t* intern(uint8_t* p, const char* name, size_t n, uint32_t* id, uint32_t* records) {
  const uint64_t h = hash::fnv1a(hash::kFnvOffset, name, n) | 1;
  const Interned name_id = g_names.intern(NameSlot{h, 0}, allocate_string_id);
  *id = name_id.id;
  if (!name_id.fresh) return p;
  p = format::put(p, rec::String{*id, {name, n}});
  ++*records;
  return p;
}

thread_local int t_depth = 0;  // this thread's NVTX range depth, returned by push and pop

int push_range(const char* name) {
  ReentryGuard guard;
  ++t_depth;
  if (!guard.entered_first) return t_depth - 1;
  if (!name) name = "";
  size_t n = strnlen(name, kMaxRangeName);
  RecordSlot slot(2 * format::kMaxFixedRecordBytes + n);
  if (!slot.ok()) return t_depth - 1;
  uint8_t* p = slot.begin();
  uint32_t id = 0, records = 1;
  p = intern(p, name, n, &id, &records);
  p = format::put(p, rec::RangePush{thread_id(), id}, slot.delta_ns());
  slot.commit(p, records);
  return t_depth - 1;
}

int pop_range() {
  ReentryGuard guard;
  if (t_depth > 0) --t_depth;
  if (guard.entered_first) emit(rec::RangePop{thread_id()});
  return t_depth;
}

// An ASCII message of an event attribute structure; other message types get a generic name.
const char* message_of(const nvtxEventAttributes_t* a) {
  if (!a || a->messageType != NVTX_MESSAGE_TYPE_ASCII || !a->message.ascii) return "(range)";
  return a->message.ascii;
}

int NVTX_API nvtx_push_a(const char* message) { return push_range(message); }
int NVTX_API nvtx_push_ex(const nvtxEventAttributes_t* a) { return push_range(message_of(a)); }
int NVTX_API nvtx_pop() { return pop_range(); }
int NVTX_API nvtx_domain_push_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  return push_range(message_of(a));
}
int NVTX_API nvtx_domain_pop(nvtxDomainHandle_t) { return pop_range(); }

template <typename F>
void install(NvtxFunctionTable table, unsigned size, unsigned id, F* fn) {
  if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace vramtrace::interpose

using namespace vramtrace::interpose;
namespace rec = vramtrace::format::rec;

// NVTX's loader calls this once per process (NVTX_INJECTION64_PATH names this library): we
// take the range push/pop entry points and leave every other NVTX call a no-op.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  if (!get_export_table) return 0;
  auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      !callbacks->GetModuleFunctionTable)
    return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) {
    install(table, size, NVTX_CBID_CORE_RangePushA, &nvtx_push_a);
    install(table, size, NVTX_CBID_CORE_RangePushEx, &nvtx_push_ex);
    install(table, size, NVTX_CBID_CORE_RangePop, &nvtx_pop);
  }
  table = nullptr;
  size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) {
    install(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &nvtx_domain_push_ex);
    install(table, size, NVTX_CBID_CORE2_DomainRangePop, &nvtx_domain_pop);
  }
  return 1;
}

// ---- vramtrace.h ------------------------------------------------------------------------------

extern "C" __attribute__((visibility("default"))) unsigned long long vramtrace_v1_pool_create(
    const char* name, int device) {
  static std::atomic<unsigned long long> next{1};
  const unsigned long long id = next.fetch_add(1);
  ReentryGuard guard;
  if (!guard.entered_first) return id;
  if (!name) name = "";
  size_t n = strnlen(name, kMaxRangeName);
  RecordSlot slot(2 * vramtrace::format::kMaxFixedRecordBytes + n);
  if (!slot.ok()) return id;
  uint8_t* p = slot.begin();
  uint32_t name_id = 0, records = 1;
  p = intern(p, name, n, &name_id, &records);
  live_pool(id, device);
  p = vramtrace::format::put(
      p, rec::UserPool{id, static_cast<uint32_t>(device < 0 ? 0 : device), name_id});
  slot.commit(p, records);
  return id;
}

extern "C" __attribute__((visibility("default"))) void vramtrace_v1_pool_segment(
    unsigned long long pool, const void* base, size_t bytes, int op) {
  ReentryGuard guard;
  if (!guard.entered_first || op < 0 || op > 3) return;
  // op 1 and 2 add memory to the pool, 0 and 3 take it away (vramtrace.h).
  live_segment(pool, reinterpret_cast<uintptr_t>(base), bytes, op == 1 || op == 2);
  emit(rec::UserSegment{pool, reinterpret_cast<uintptr_t>(base), bytes,
                        static_cast<vramtrace::format::SegmentOp>(op)});
}

extern "C" __attribute__((visibility("default"))) void vramtrace_v1_block(unsigned long long pool,
                                                                          const void* ptr,
                                                                          size_t bytes) {
  ReentryGuard guard;
  if (!guard.entered_first) return;
  CapturedStack stack;
  // The program asked for its blocks to be seen: each gets a stack, like a cudaMalloc (unless
  // VRAMTRACE_STACKS=none).
  if (bytes) capture_stack(&stack);
  if (bytes)
    live_alloc(LiveKind::Block, -1, reinterpret_cast<uintptr_t>(ptr), bytes, stack, pool);
  else
    live_free(LiveKind::Block, reinterpret_cast<uintptr_t>(ptr), pool);
  emit_with_stack(rec::UserBlock{pool, reinterpret_cast<uintptr_t>(ptr), bytes, thread_id()},
                  stack);
}

extern "C" __attribute__((visibility("default"))) void vramtrace_v1_pool_oom(
    unsigned long long pool, size_t requested) {
  ReentryGuard guard;
  if (!guard.entered_first) return;
  CapturedStack stack;
  if (async_stack_wanted(requested, true)) capture_stack(&stack);
  emit_with_stack(rec::UserOom{pool, requested, thread_id(), 0}, stack);
  recorder_flush_failure();
}

extern "C" __attribute__((visibility("default"))) void vramtrace_v1_step(long long step) {
  ReentryGuard guard;
  if (!guard.entered_first) return;
  emit(rec::Step{static_cast<uint64_t>(step < 0 ? 0 : step)});
}

// An NVTX-like range of the calling thread, for programs that do not link NVTX (the Python API's
// vramtrace.region): recorded exactly as an NVTX range push and pop.
extern "C" __attribute__((visibility("default"))) int vramtrace_v1_range_push(const char* name) {
  return push_range(name);
}

extern "C" __attribute__((visibility("default"))) int vramtrace_v1_range_pop() {
  return pop_range();
}

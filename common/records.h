// The records of a vramtrace stream, declared once: VRAMTRACE_RECORDS below is the one table of
// every record's type number, whether it carries a time, and its fields in wire order. From it
// come the RecordType enum, a struct per record, the encoder the library and the test builders
// write with (put), the decoder the collector reads with (decode), each record's size bound and
// its name. Adding a record is one line in the table (and a handler in collector/model/model.cpp).
//
// On the wire a record is its type byte, then, for a timed record, the time since the frame's
// previous timed record (a varint; the first counts from FrameHeader::base_time_ns), then its
// fields in table order:
//   U64, U32  a varint (a U32 field is kept as 32 bits when decoded, as the reader always has)
//   Dev       a varint, a CUDA device ordinal: one of kMaxDeviceOrdinals or more is corruption
//   Api       one byte, an Api
//   Op        a varint, a SegmentOp: a larger value is corruption
//   At        a varint, an absolute CLOCK_MONOTONIC time: the record's time (Process)
//   Str       a varint length and that many bytes (text, or raw bytes: a uuid, a build-id)
// A decoded record is a Record: its type, its time (absolute; records without one: 0) and the
// struct of its type, whose strings view the reader's frame (valid until the next record).
// Nothing here allocates: put runs on the traced process's hot path.
//
// Compatibility (as memray does it): record types and fields are only ever appended; a change
// of meaning bumps kFormatVersion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/format.h"

namespace vramtrace::format {

// X(Name, member, type number, Timed|Untimed|Custom, fields): `member` is the record's name in
// Record. A Custom record's codec is written by hand below (Settings: a count of fields).
#define VRAMTRACE_RECORDS(X, F)                                                                    \
  /* The process: written first in every stream. cmdline: arguments joined by '\0'; rank_env:      \
     "RANK=0\nLOCAL_RANK=0\n...". */                                                               \
  X(Process, process, 1, Untimed,                                                                  \
    F(U64, pid) F(U64, ppid) F(U64, realtime_ns) F(At, start_ns) F(Str, host) F(Str, exe)          \
        F(Str, cmdline) F(Str, rank_env))                                                          \
  /* A CUDA context made on a device; uuid: 16 raw bytes. */                                       \
  X(ContextCreate, context_create, 2, Timed,                                                       \
    F(U64, context) F(Dev, device) F(U64, total_bytes) F(Str, name) F(Str, uuid))                  \
  X(ContextDestroy, context_destroy, 3, Timed, F(U64, context))                                    \
  /* address: device pointer, array handle or host pointer (see Api). */                           \
  X(Alloc, alloc, 4, Timed,                                                                        \
    F(Api, api) F(Dev, device) F(U64, address) F(U64, bytes) F(U64, stream) F(U32, thread))        \
  /* Recorded before the real free runs. */                                                        \
  X(Free, free, 5, Timed,                                                                          \
    F(Api, api) F(Dev, device) F(U64, address) F(U64, stream) F(U32, thread))                      \
  /* result: the CUresult. */                                                                      \
  X(AllocFailed, alloc_failed, 6, Timed,                                                           \
    F(Api, api) F(Dev, device) F(U64, bytes) F(U64, result) F(U32, thread))                        \
  /* name_id: a String record's id (0: no name, a graph launch). */                                \
  X(Launch, launch, 7, Timed, F(Api, api) F(Dev, device) F(U64, stream) F(U32, name_id))           \
  /* An interned string: kernel, range and pool names share the ids. */                            \
  X(String, string, 8, Untimed, F(U32, id) F(Str, text))                                           \
  /* cuMemCreate: physical memory made. */                                                         \
  X(VmmCreate, vmm_create, 9, Timed, F(Dev, device) F(U64, handle) F(U64, bytes))                  \
  /* cuMemRelease: its bytes stay while still mapped. */                                           \
  X(VmmRelease, vmm_release, 10, Timed, F(U64, handle))                                            \
  X(VmmMap, vmm_map, 11, Timed, F(U64, address) F(U64, bytes) F(U64, offset) F(U64, handle))       \
  X(VmmUnmap, vmm_unmap, 12, Timed, F(U64, address) F(U64, bytes))                                 \
  /* Records dropped since the previous Dropped record (the buffers were full). */                 \
  X(Dropped, dropped, 13, Untimed, F(U64, count))                                                  \
  /* The process reached exit() cleanly: records written and dropped in all. */                    \
  X(ProcessExit, process_exit, 14, Timed, F(U64, recorded) F(U64, dropped))                        \
  /* The library gave up on this process (no CUPTI, CUPTI held by another tool): it is not         \
     profiled, and the one-line text says why. Only give_up() (interpose/cupti_hooks.cpp)          \
     writes it; a notice that does not mean "not profiled" would need a record of its own. */      \
  X(Notice, notice, 15, Untimed, F(Str, text))                                                     \
  /* cuMemGetInfo, at context creation and at an OOM. */                                           \
  X(MemInfo, mem_info, 16, Timed, F(Dev, device) F(U64, free_bytes) F(U64, total_bytes))           \
  /* A stream-ordered pool's footprint, sent after async allocations and frees (throttled) when    \
     it changed; reserved_high: the driver's reserved high-water mark. */                          \
  X(PoolUsage, pool_usage, 17, Timed,                                                              \
    F(Dev, device) F(U64, pool) F(U64, reserved) F(U64, used) F(U64, reserved_high))               \
  /* Stacks, a trace tree interned in the target (interpose/stacks.cpp). A native frame, written   \
     once; parent 0: the root. */                                                                  \
  X(StackNode, stack_node, 18, Untimed, F(U32, id) F(U32, parent) F(U64, ip))                      \
  /* A Python frame; code: a PyCode record's id. */                                                \
  X(PyStackNode, py_stack_node, 19, Untimed, F(U32, id) F(U32, parent) F(U32, code) F(U32, line))  \
  /* A Python code location, written once. */                                                      \
  X(PyCode, py_code, 20, Untimed, F(U32, id) F(Str, file) F(Str, function))                        \
  /* The stack of the Alloc, AllocFailed, VmmCreate, UserBlock or UserOom record right after it    \
     (py_leaf 0: none). */                                                                         \
  X(AllocStack, alloc_stack, 21, Untimed, F(U32, native_leaf) F(U32, py_leaf))                     \
  /* One loaded module. A generation other than the previous Module record's starts a new map      \
     (sent at start and again after dlopen/dlclose); stack nodes are resolved against the map      \
     current when they were written. build_id: the GNU build-id, raw bytes. */                     \
  X(Module, module, 22, Untimed,                                                                   \
    F(U64, generation) F(U64, load_bias) F(U64, start) F(U64, end) F(Str, path) F(Str, build_id))  \
  /* Phases and sub-allocators (interpose/annotate.cpp, vramtrace.h, PyTorch's trace). An NVTX     \
     range pushed on a thread; name_id: a String record's id. */                                   \
  X(RangePush, range_push, 23, Timed, F(U32, thread) F(U32, name_id))                              \
  /* The innermost NVTX range of that thread ends. */                                              \
  X(RangePop, range_pop, 24, Timed, F(U32, thread))                                                \
  /* A sub-allocator's pool (vramtrace_pool_create). */                                            \
  X(UserPool, user_pool, 25, Untimed, F(U64, pool) F(Dev, device) F(U32, name_id))                 \
  /* Memory the pool carves blocks from. */                                                        \
  X(UserSegment, user_segment, 26, Timed, F(U64, pool) F(U64, address) F(U64, bytes) F(Op, op))    \
  /* A block handed out by the pool (bytes 0: freed). */                                           \
  X(UserBlock, user_block, 27, Timed, F(U64, pool) F(U64, address) F(U64, bytes) F(U32, thread))   \
  /* The pool could not satisfy a request; free_plus_one: the device's free bytes + 1 (0:          \
     unknown). */                                                                                  \
  X(UserOom, user_oom, 28, Timed, F(U64, pool) F(U64, bytes) F(U32, thread) F(U64, free_plus_one)) \
  /* The program starts an iteration (vramtrace_step). */                                          \
  X(Step, step, 29, Timed, F(U64, step))                                                           \
  /* What the library was set to record (see Setting), written right after the Process record      \
     and only when a setting is not its default (a default trace stays readable by older           \
     readers). On the wire: a count, then that many varints, one per Setting in order; a reader    \
     skips the fields after those it knows, and a trace without the record had every default.      \
     Decoded: launches (1 unless the record says 0) and the count. */                              \
  X(Settings, settings, 30, Custom, F(U64, launches) F(U64, fields))                               \
  /* The CUPTI library the process loaded (its file, as the loader names it). */                   \
  X(CuptiLibrary, cupti_library, 31, Untimed, F(Str, path))                                        \
  /* A non-zero status the process gave exit() (or main returned), as its parent sees it (1-255),  \
     written right before ProcessExit. Only a non-zero one is written, so that the trace of a      \
     program that exits 0 stays readable by older readers (which stop at a type they do not        \
     know); ProcessExit without it: 0, or a trace from before the record. */                       \
  X(ExitStatus, exit_status, 32, Untimed, F(U64, status))                                          \
  /* Kernel launches stop being recorded from this record's time on (their callbacks were          \
     disabled in a running process): launch counts, the last kernel before an allocation and the   \
     launch rhythm end here; what follows is not recorded, not absent. reason: a StopReason. */    \
  X(LaunchesStopped, launches_stopped, 33, Timed, F(U64, reason))

// The fields of a Settings record, by position. Append only.
enum class Setting : uint8_t {
  // 1: kernel launches recorded (the default); 0: not recorded (VRAMTRACE_LAUNCHES=off,
  // `vramtrace run --launches=off`): the launch callbacks were never enabled, so the trace has
  // no Launch record, and launch counts, the kernel at the peak and iterations found by the
  // launch rhythm are unknown, not zero.
  Launches = 0,
  kCount
};

// Why launches stopped being recorded (a LaunchesStopped record's reason). Append only.
enum class StopReason : uint8_t {
  // The program asked (vramtrace_stop_launches()) for a reason of its own.
  kProgram = 0,
  // PyTorch's start-up hook marks this process's iterations and phases itself, so that the
  // launch callbacks (about 1 us per launch, the largest cost on a launch-bound step) are
  // disabled once it has marked two iterations; `vramtrace run --launches=on` keeps them.
  kPythonHook = 1,
};

// More fields than this in a Settings record is corruption.
inline constexpr uint64_t kMaxSettings = 64;

// A CUDA device ordinal is below cuDeviceGetCount(); one this large is corruption, and each
// distinct one costs a device in the model and the report (a crafted 0.5 MB trace of 40k
// ordinals made a 150 MB report.json and 1.4 GiB of memory).
inline constexpr uint32_t kMaxDeviceOrdinals = 4096;

#define VRAMTRACE_IGNORE_FIELDS(...)
#define VRAMTRACE_ENUM_ENTRY(Name, member, id, timing, fields) Name = id,
enum class RecordType : uint8_t {
  VRAMTRACE_RECORDS(VRAMTRACE_ENUM_ENTRY, VRAMTRACE_IGNORE_FIELDS)
};
#undef VRAMTRACE_ENUM_ENTRY

// ---- field kinds --------------------------------------------------------------------------------

namespace field {

// Every kind but Str: no text.
struct Fixed {
  static constexpr bool kText = false;
  template <typename T>
  static constexpr size_t text_bytes(const T&) {
    return 0;
  }
};

struct DecodeState {
  bool bad = false;   // a value no writer produces (the record is corrupt)
  uint64_t* time_ns;  // the record's time (an At field sets it)
};

struct U64 : Fixed {
  using type = uint64_t;
  static constexpr size_t kMaxBytes = 10;
  static uint8_t* put(uint8_t* p, type v) { return put_varint(p, v); }
  static type get(ByteReader& r, DecodeState&) { return r.varint(); }
};
struct U32 : Fixed {
  using type = uint32_t;
  static constexpr size_t kMaxBytes = 10;
  static uint8_t* put(uint8_t* p, type v) { return put_varint(p, v); }
  static type get(ByteReader& r, DecodeState&) { return static_cast<type>(r.varint()); }
};
struct Dev : Fixed {
  using type = uint32_t;
  static constexpr size_t kMaxBytes = 10;
  static uint8_t* put(uint8_t* p, type v) { return put_varint(p, v); }
  static type get(ByteReader& r, DecodeState& s) {
    auto v = static_cast<type>(r.varint());
    if (v >= kMaxDeviceOrdinals) s.bad = true;
    return v;
  }
};
struct ApiField : Fixed {
  using type = Api;
  static constexpr size_t kMaxBytes = 1;
  static uint8_t* put(uint8_t* p, type v) { return put_u8(p, static_cast<uint8_t>(v)); }
  static type get(ByteReader& r, DecodeState&) { return static_cast<type>(r.u8()); }
};
struct Op : Fixed {
  using type = SegmentOp;
  static constexpr size_t kMaxBytes = 10;
  static uint8_t* put(uint8_t* p, type v) { return put_varint(p, static_cast<uint64_t>(v)); }
  static type get(ByteReader& r, DecodeState& s) {
    uint64_t v = r.varint();
    if (v > static_cast<uint64_t>(SegmentOp::Unmap)) s.bad = true;
    return static_cast<type>(v);
  }
};
struct At : Fixed {
  using type = uint64_t;
  static constexpr size_t kMaxBytes = 10;
  static uint8_t* put(uint8_t* p, type v) { return put_varint(p, v); }
  static type get(ByteReader& r, DecodeState& s) { return *s.time_ns = r.varint(); }
};
// kMaxBytes: what a string field takes besides its text (its length).
struct Str {
  using type = std::string_view;
  static constexpr size_t kMaxBytes = 10;
  static constexpr bool kText = true;
  static constexpr size_t text_bytes(type v) { return v.size(); }
  static uint8_t* put(uint8_t* p, type v) { return put_bytes(p, v.data(), v.size()); }
  static type get(ByteReader& r, DecodeState&) {
    size_t n = 0;
    const char* s = r.bytes(&n);
    return {s, n};
  }
};
using Api = ApiField;

}  // namespace field

// ---- one struct per record --------------------------------------------------------------------

namespace rec {

#define VRAMTRACE_FIELD_DECL(kind, name) field::kind::type name;
#define VRAMTRACE_STRUCT(Name, member, id, timing, fields)   \
  struct Name {                                              \
    static constexpr RecordType kType = RecordType::Name;    \
    static constexpr bool kTimed = VRAMTRACE_TIMED_##timing; \
    fields                                                   \
  };
#define VRAMTRACE_TIMED_Timed true
#define VRAMTRACE_TIMED_Untimed false
#define VRAMTRACE_TIMED_Custom false
VRAMTRACE_RECORDS(VRAMTRACE_STRUCT, VRAMTRACE_FIELD_DECL)
#undef VRAMTRACE_STRUCT
#undef VRAMTRACE_FIELD_DECL

}  // namespace rec

// A decoded record: its type, its time, and the struct of its type (the member named in the
// table: r.alloc for an Alloc).
struct Record {
  RecordType type{};
  // CLOCK_MONOTONIC of the traced host, absolute; 0 for records without a time.
  uint64_t time_ns = 0;
#define VRAMTRACE_MEMBER(Name, member, id, timing, fields) rec::Name member;
  Record() : none_(0) {}
  union {
    char none_;  // before the first record
    VRAMTRACE_RECORDS(VRAMTRACE_MEMBER, VRAMTRACE_IGNORE_FIELDS)
  };
#undef VRAMTRACE_MEMBER
};

// ---- names and sizes --------------------------------------------------------------------------

inline const char* record_name(RecordType t) {
  switch (t) {
#define VRAMTRACE_NAME(Name, member, id, timing, fields) \
  case RecordType::Name: return #Name;
    VRAMTRACE_RECORDS(VRAMTRACE_NAME, VRAMTRACE_IGNORE_FIELDS)
#undef VRAMTRACE_NAME
  }
  return "unknown";
}

// The most bytes a record of type R takes, its strings' text excluded, and whether it has text.
template <typename R>
constexpr size_t max_fixed_bytes();
template <typename R>
constexpr bool has_text();
#define VRAMTRACE_FIELD_SIZE(kind, name) +field::kind::kMaxBytes
#define VRAMTRACE_FIELD_TEXT(kind, name) || field::kind::kText
#define VRAMTRACE_SIZE(Name, member, id, timing, fields) \
  template <>                                            \
  constexpr size_t max_fixed_bytes<rec::Name>() {        \
    return 1 + (rec::Name::kTimed ? 10 : 0)fields;       \
  }
#define VRAMTRACE_TEXT(Name, member, id, timing, fields) \
  template <>                                            \
  constexpr bool has_text<rec::Name>() {                 \
    return false fields;                                 \
  }
VRAMTRACE_RECORDS(VRAMTRACE_SIZE, VRAMTRACE_FIELD_SIZE)
VRAMTRACE_RECORDS(VRAMTRACE_TEXT, VRAMTRACE_FIELD_TEXT)
#undef VRAMTRACE_TEXT
#undef VRAMTRACE_SIZE
#undef VRAMTRACE_FIELD_TEXT
#undef VRAMTRACE_FIELD_SIZE

// The most bytes put() writes for `r`, its text included.
#define VRAMTRACE_FIELD_TEXT_BYTES(kind, name) +field::kind::text_bytes(r.name)
#define VRAMTRACE_MAX_BYTES(Name, member, id, timing, fields) \
  inline size_t max_bytes(const rec::Name& r) {               \
    (void)r;                                                  \
    return max_fixed_bytes<rec::Name>() fields;               \
  }
VRAMTRACE_RECORDS(VRAMTRACE_MAX_BYTES, VRAMTRACE_FIELD_TEXT_BYTES)
#undef VRAMTRACE_MAX_BYTES
#undef VRAMTRACE_FIELD_TEXT_BYTES

// The largest record without text, whole (a slot of this size holds any one of them). A record
// with text is sized by its writer: max_fixed_bytes<R>() plus the lengths of its strings.
inline constexpr size_t kMaxFixedRecordBytes = 1 + 7 * 10;
#define VRAMTRACE_SIZE_CHECK(Name, member, id, timing, fields)                                 \
  static_assert(has_text<rec::Name>() || max_fixed_bytes<rec::Name>() <= kMaxFixedRecordBytes, \
                #Name " does not fit kMaxFixedRecordBytes");
VRAMTRACE_RECORDS(VRAMTRACE_SIZE_CHECK, VRAMTRACE_IGNORE_FIELDS)
#undef VRAMTRACE_SIZE_CHECK

// ---- encoding (hot path: no allocation, the caller guarantees room) --------------------------

// put(p, record) for an untimed record, put(p, record, dt_ns) for a timed one (dt_ns: the time
// since the frame's previous timed record). Returns the end of what was written.
#define VRAMTRACE_PUT_FIELD(kind, name) p = field::kind::put(p, r.name);
#define VRAMTRACE_PUT_Timed(Name, fields)                               \
  inline uint8_t* put(uint8_t* p, const rec::Name& r, uint64_t dt_ns) { \
    p = put_u8(p, static_cast<uint8_t>(RecordType::Name));              \
    p = put_varint(p, dt_ns);                                           \
    fields return p;                                                    \
  }
#define VRAMTRACE_PUT_Untimed(Name, fields)                \
  inline uint8_t* put(uint8_t* p, const rec::Name& r) {    \
    p = put_u8(p, static_cast<uint8_t>(RecordType::Name)); \
    fields return p;                                       \
  }
#define VRAMTRACE_PUT_Custom(Name, fields)
#define VRAMTRACE_PUT(Name, member, id, timing, fields) VRAMTRACE_PUT_##timing(Name, fields)
VRAMTRACE_RECORDS(VRAMTRACE_PUT, VRAMTRACE_PUT_FIELD)
#undef VRAMTRACE_PUT
#undef VRAMTRACE_PUT_Timed
#undef VRAMTRACE_PUT_Untimed
#undef VRAMTRACE_PUT_Custom
#undef VRAMTRACE_PUT_FIELD

// A Settings record of every setting this library knows, in Setting order.
inline uint8_t* put(uint8_t* p, const rec::Settings& r) {
  static_assert(static_cast<int>(Setting::kCount) == 1, "write every setting");
  p = put_u8(p, static_cast<uint8_t>(RecordType::Settings));
  p = put_varint(p, static_cast<uint64_t>(Setting::kCount));
  return put_varint(p, r.launches);
}

// ---- decoding (collector: every read is bounds-checked) --------------------------------------

// A Settings record's fields (see the table).
inline bool decode_settings(ByteReader& r, rec::Settings& out) {
  const uint64_t n = r.varint();
  if (n > kMaxSettings) return false;
  out.launches = 1;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t v = r.varint();
    if (i == static_cast<uint64_t>(Setting::Launches)) {
      if (v > 1) return false;
      out.launches = v;
    }  // fields of later settings: skipped
  }
  out.fields = n;
  return true;
}

// One record into `out`. `clock`: the frame's time so far, moved by a timed record. False when
// the record is corrupt (an unknown type, a value no writer produces, or it runs past the end).
[[gnu::always_inline]] inline bool decode(ByteReader& r, uint64_t& clock, Record& out) {
  out.type = static_cast<RecordType>(r.u8());
  out.time_ns = 0;
  field::DecodeState s{false, &out.time_ns};
  switch (out.type) {
#define VRAMTRACE_GET_FIELD(kind, name) f.name = field::kind::get(r, s);
#define VRAMTRACE_TIME_Timed out.time_ns = clock += r.varint();
#define VRAMTRACE_TIME_Untimed
#define VRAMTRACE_DECODE_Timed(member, fields) \
  {                                            \
    VRAMTRACE_TIME_Timed auto& f = out.member; \
    fields break;                              \
  }
#define VRAMTRACE_DECODE_Untimed(member, fields) \
  {                                              \
    auto& f = out.member;                        \
    fields break;                                \
  }
#define VRAMTRACE_DECODE_Custom(member, fields)      \
  if (!decode_##member(r, out.member)) return false; \
  break;
#define VRAMTRACE_DECODE(Name, member, id, timing, fields) \
  case RecordType::Name: out.member = {}; VRAMTRACE_DECODE_##timing(member, fields)
    VRAMTRACE_RECORDS(VRAMTRACE_DECODE, VRAMTRACE_GET_FIELD)
#undef VRAMTRACE_DECODE
#undef VRAMTRACE_DECODE_Custom
#undef VRAMTRACE_DECODE_Untimed
#undef VRAMTRACE_DECODE_Timed
#undef VRAMTRACE_TIME_Untimed
#undef VRAMTRACE_TIME_Timed
#undef VRAMTRACE_GET_FIELD
    default: return false;
  }
  return !s.bad && r.ok();
}

}  // namespace vramtrace::format

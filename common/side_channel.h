// The Python start-up hook's side channel, declared once: the lines that the hook
// (python/vramtrace/_hook/sitecustomize.py) writes into vramtrace.<pid>.torch for PyTorch and
// vramtrace.<pid>.jax for JAX, and that collector/ingest/torch_trace.cpp reads. From the table
// below come the reader's dispatch (a struct per kind of line, decoded and validated here, handed
// to that kind's handler) and the mark kinds; tests/hook/side_channel_test.py checks every line the
// hook writes against it (its tag, its fields in order and their types), and
// tests/unit/side_channel_test.cpp checks the reader against it. A new kind of line is a row
// here, a handler in collector/ingest/torch_trace.cpp and the hook's writer.
//
// A file is UTF-8 text, one record a line, fields separated by tabs (the hook writes no tab or
// newline inside a field). The first line is the header: "vramtrace.torch/2" (version 1: the
// lines of `since` 1 only), then VRAMTRACE_SIDE_HEADER's fields. Every other line starts with
// its tag. Field kinds:
//   U64       a decimal number, the whole field
//   Dev       a CUDA device ordinal: a U64 below kMaxDevice
//   Real      the decimal number the field starts with (a float)
//   Lead      the unsigned decimal number the field starts with
//   MaybeU64  a U64, or anything else for "unknown" (the hook writes an empty field)
//   Ids       F lines' ids separated by commas, innermost frame first (unknown ids are skipped)
//   Where     frames separated by '|', innermost first, each file:line:function
//   Text      text; T(name, keep): the reader keeps its first `keep` bytes (0: all of it)
// Times are the Unix epoch's (time_us, time_ns): PyTorch's clock agrees with Python's
// time.time_ns() to the microsecond (tests/gpu/real/probe_hooks.py). The reader moves them
// onto the header's monotonic clock.
//
// What a line that does not fit its row does (the reader's behaviour since the format began):
//   Stop    fewer fields, or a bad one, stops the reading there: "line N: <problem>"
//   Match   fewer fields: not this kind of line (an unknown record, which stops the reading);
//           a bad field stops the reading with the problem
//   Skip    fewer fields: an unknown record; a bad field: the line is skipped
//   Lax     fewer fields or a bad one: the line is skipped
//   Unread  its fields are for a person reading the file: the line counts whatever they are
// A field past those declared is ignored; an empty line is skipped.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>
#include <system_error>

namespace vramtrace::side {

// The header's fields, after "vramtrace.torch/<version>": the traced process, the two clocks
// read together when the hook started (epoch and monotonic, ns), the framework's version
// ("jax <version>" for JAX).
#define VRAMTRACE_SIDE_HEADER(F, T) \
  F(U64, pid) F(U64, realtime_ns) F(U64, monotonic_ns) T(version, 64)

// X(Name, tag, since, on a bad line, problem, fields): since, the version whose files may hold
// the line (in an older file it is an unknown record); problem, the words of "line N: ...".
#define VRAMTRACE_SIDE_LINES(X, F, T)                                                              \
  /* A Python frame that PyTorch's trace recorded, named by id in E lines. */                      \
  X(Frame, "F", 1, Stop, "bad frame", F(U64, id) T(file, 4096) F(U64, line) T(function, 4096))     \
  /* An entry of PyTorch's allocator trace (its ring buffer): action is PyTorch's                  \
     (segment_alloc, segment_free, segment_map, segment_unmap, alloc, free_requested,              \
     free_completed, oom, snapshot, ...); device_free, cudaMemGetInfo's free bytes at an oom. */   \
  X(Entry, "E", 1, Stop, "bad event",                                                              \
    F(Dev, device) T(action, 0) F(U64, address) F(U64, bytes) F(U64, stream) F(U64, time_us)       \
        F(Ids, frames) F(MaybeU64, device_free))                                                   \
  /* The trace ring of a device was full: its earliest entries are lost. */                        \
  X(Wrapped, "W", 1, Lax, "", F(Dev, device) F(U64, entries))                                      \
  /* A segment of the allocator at the dump, written when a ring was full. */                      \
  X(DumpSegment, "G", 2, Match, "bad allocator state",                                             \
    F(Dev, device) F(U64, address) F(U64, bytes))                                                  \
  /* A block in use at the dump (the size asked for), written when a ring was full. */             \
  X(DumpBlock, "A", 2, Match, "bad allocator state", F(Dev, device) F(U64, address) F(U64, bytes)) \
  /* --torch=sampled: the trace of a device switched off here (its entries stop until the next     \
     U line); peak_bytes, PyTorch's max_memory_allocated then (empty: unknown). */                 \
  X(GapStart, "O", 2, Match, "bad trace gap",                                                      \
    F(Dev, device) F(U64, time_us) F(MaybeU64, peak_bytes))                                        \
  /* The end of a device's gap (the trace on again, or the dump while it was off): the             \
     allocator's state then follows in H and B lines; peak_bytes as in O. */                       \
  X(GapEnd, "U", 2, Match, "bad trace gap",                                                        \
    F(Dev, device) F(U64, time_us) F(MaybeU64, peak_bytes))                                        \
  /* --torch=sampled: PyTorch's max_memory_allocated of a device at the dump. */                   \
  X(DumpPeak, "Y", 2, Lax, "", F(Dev, device) F(MaybeU64, peak_bytes))                             \
  /* Whether the allocator trace was sampled (by default: where it would cost more than            \
     budget_ppm millionths of an iteration): the iteration judged (the last of the first ones),    \
     its blocks (PyTorch's count of allocations), its time and the trace's estimated cost in it;   \
     sampled 1 when the trace then went off between the sampled iterations, else 0. */             \
  X(TraceCost, "I", 2, Lax, "",                                                                    \
    F(U64, blocks) F(U64, iteration_us) F(U64, trace_us) F(U64, budget_ppm) F(U64, sampled))       \
  /* A segment of the allocator at the last U line of its device. */                               \
  X(GapSegment, "H", 2, Match, "bad trace gap", F(Dev, device) F(U64, address) F(U64, bytes))      \
  /* A block in use at the last U line of its device (the size asked for). */                      \
  X(GapBlock, "B", 2, Match, "bad trace gap", F(Dev, device) F(U64, address) F(U64, bytes))        \
  /* An nn.Module, when first called: ids count up from 1 in file order. */                        \
  X(Module, "M", 2, Match, "bad module",                                                           \
    F(U64, id) T(name, 1024) T(type, 256) T(file, 4096) F(U64, line))                              \
  /* A line of the user's code (where the model, backward() or step() was called): ids count       \
     up from 1 in file order. */                                                                   \
  X(Site, "S", 2, Match, "bad site", F(U64, id) T(file, 4096) F(U64, line) T(function, 1024))      \
  /* A mark (kind: VRAMTRACE_SIDE_MARKS); id: the module's for a module call and a forward (a      \
     forward's bit 31: under autocast; bit 30: its inner module calls not traced), the site's      \
     for a site, 1 for the first optimizer's step; a FedBack's: the module's, with bits 24-31 the  \
     count of input tensors that its previous forward returned. */                                 \
  X(Mark, "K", 2, Match, "bad mark", F(U64, time_ns) F(U64, kind) F(U64, id))                      \
  /* A named storage live then: kind param, buffer, grad or state; shape "2x3"; dtype float32. */  \
  X(Label, "L", 2, Match, "bad label",                                                             \
    F(U64, time_ns) F(Dev, device) F(U64, ptr) F(U64, bytes) T(kind, 16) T(name, 1024)             \
        T(shape, 256) T(dtype, 64))                                                                \
  /* PyTorch's per-process memory fraction of a device (kept when in (0, 1]). */                   \
  X(Limit, "Q", 2, Skip, "", F(Dev, device) F(Real, fraction) F(U64, total_bytes))                 \
  /* The exception that ended the program. */                                                      \
  X(Exception, "X", 2, Match, "bad exception",                                                     \
    F(U64, time_ns) T(type, 256) T(message, 2048) F(Where, frames))                                \
  /* XLA's pool on a device, from JAX's memory_stats() at exit (a .jax file). */                   \
  X(Xla, "J", 2, Match, "bad XLA statistics",                                                      \
    F(Dev, device) F(U64, in_use) F(U64, peak_in_use) F(U64, limit) F(U64, reserved)               \
        F(U64, largest_alloc))                                                                     \
  /* A segment of a private pool at the dump (segment_pool_id not (0, 0)); kind "graph" for a      \
     CUDA graph's pool, "pool" for another (torch.cuda.MemPool). */                                \
  X(PoolSegment, "P", 1, Stop, "bad private pool segment",                                         \
    F(Dev, device) F(U64, address) F(U64, bytes) F(U64, pool_id_0) F(U64, pool_id_1) T(kind, 0))   \
  /* Marks dropped, the oldest (the hook keeps at most 4 million). */                              \
  X(Dropped, "D", 2, Skip, "", F(Lead, marks))                                                     \
  /* PYTORCH_CUDA_ALLOC_CONF, or PYTORCH_ALLOC_CONF, when set. */                                  \
  X(AllocConf, "C", 1, Skip, "", T(conf, 4096))                                                    \
  /* A training step predicted on fake tensors: the hook ran the model's whole step                \
     (forward, loss, backward, optimizer step) on PyTorch's FakeTensorMode at batch `batch`        \
     and recorded the storages it made and freed: for a process that died before its first         \
     optimizer step ended, or (with a V line) with a remedy's change. recorded_batch: the          \
     batch the run used; status "ok" or why it could not (then no R lines); time_ns: when the      \
     real step began (its first forward); id counts from 1. */                                     \
  X(PredictedStep, "N", 2, Match, "bad predicted step",                                            \
    F(Dev, device) F(U64, id) F(U64, batch) F(U64, recorded_batch) F(U64, time_ns)                 \
        T(status, 1024))                                                                           \
  /* The change a predicted step was run with, after its N line: "none" (the step as the program   \
     runs it, for a process whose step did end: the reference the changes are weighed against),    \
     "bf16_autocast" (its forward and loss under torch.autocast(bfloat16)), "checkpoint" (each of  \
     `modules`, M ids separated by commas, under torch.utils.checkpoint). A step with no V line    \
     is the completion of a step the process never finished. */                                    \
  X(PredictedChange, "V", 2, Match, "bad predicted change",                                        \
    F(U64, step) T(change, 32) T(modules, 0))                                                      \
  /* A request of a predicted step, in order: op "a" a block of `bytes` made, "f" that block       \
     freed; block numbers count from 1 within the step; module: an M line's id (0: none);          \
     phase: "f" forward, "l" loss, "b" backward, "s" optimizer step. Blocks alive at the step's    \
     end (gradients, optimizer state) have no "f". */                                              \
  X(PredictedRequest, "R", 2, Match, "bad predicted request",                                      \
    F(U64, step) T(op, 1) F(U64, block) F(U64, bytes) F(U64, module) T(phase, 1))                  \
  /* `vramtrace plan` (VRAMTRACE_PLAN=1): the process stopped at time_ns, before the first         \
     training forward (at batch `batch`) ran, its step predicted on fake tensors (N, V, R lines)   \
     in spent_ns; rng_restored 1: the RNG states were read before the fake steps and put back;     \
     loss: "program" (the program's own loop ran the steps on fake tensors: its loss, scaler,      \
     zero_grad and accumulation), "model" (the model's own loss in a stand-in step),               \
     "cross_entropy" or "sum" (assumed), "" (unknown). */                                          \
  X(PlanStop, "Z", 2, Match, "bad plan stop",                                                      \
    F(U64, time_ns) F(U64, batch) F(U64, spent_ns) F(U64, rng_restored) T(loss, 32))               \
  /* What `vramtrace plan` says of how its steps ran, in order (the program's own loop: the steps  \
     it gave, those the stand-in gave and why, values read from fake tensors, what it put back).   \
   */                                                                                              \
  X(PlanNote, "ZN", 2, Lax, "", T(note, 1024))                                                     \
  /* What the stand-in step assumed of the program's loop where it ran instead of the program's    \
     own (a pre-flight, a step completed at exit, a plan whose loop could not run): one line       \
     each, written with the predicted steps. */                                                    \
  X(StepAssumption, "SA", 2, Lax, "", T(note, 1024))                                               \
  /* `vramtrace run --preflight` (VRAMTRACE_PREFLIGHT=1): at time_ns, before the first training    \
     forward (at batch `batch`) ran, its step was predicted on fake tensors (N, V, R lines) in     \
     spent_ns and the launcher asked for its verdict; the program then went on. Fields as Z's. */  \
  X(Preflight, "PF", 2, Match, "bad pre-flight",                                                   \
    F(U64, time_ns) F(U64, batch) F(U64, spent_ns) F(U64, rng_restored) T(loss, 32))               \
  /* The file is complete: the trace's entries in all. */                                          \
  X(End, "END", 1, Unread, "", F(U64, entries))

// M(Name, the hook's constant): the kinds of K lines, in order (their numbers count from 0).
#define VRAMTRACE_SIDE_MARKS(M)                                                           \
  M(Module, _MOD) /* a module call inside a forward (id: the module's) */                 \
  M(ModuleEnd, _MOD_END)                                                                  \
  M(Forward, _FWD)          /* an outermost module call in training mode, gradients on */ \
  M(ForwardEval, _FWD_EVAL) /* with gradients off (no_grad, inference_mode) */            \
  M(ForwardEnd, _FWD_END)                                                                 \
  M(Backward, _BWD)                                                                       \
  M(BackwardEnd, _BWD_END)                                                                \
  M(Step, _STEP) /* an optimizer step */                                                  \
  M(StepEnd, _STEP_END)                                                                   \
  M(Site, _SITE) /* the user's line of what follows (id: the site's) */                   \
  M(Oom, _OOM)                                                                            \
  M(ForwardEvalGrad, _FWD_EVAL_GRAD) /* in eval mode with gradients on */                 \
  M(Move, _MOVE) /* a tensor moved (Tensor.to, .cuda) outside forward, backward, step */  \
  M(MoveEnd, _MOVE_END)                                                                   \
  M(Named, _NAMED) /* every named storage (parameter, gradient, state) labelled now */    \
  /* a forward got its previous forward's outputs back (a carried state); id: the */      \
  /* outermost module's, bits 24-31 how many tensors */                                   \
  M(FedBack, _FED_BACK)

inline constexpr char kMagic[] = "vramtrace.torch/";
inline constexpr int kVersion = 2;  // what the hook writes
// A device ordinal this large is corruption (as in common/records.h).
inline constexpr uint64_t kMaxDevice = 4096;
// The most fields a kind of line declares.
inline constexpr size_t kMaxFields = 8;

enum class OnBad : uint8_t { Stop, Match, Skip, Lax, Unread };

// ---- field kinds: how a field's text is read --------------------------------------------------

namespace field {

// from_chars's reading: `v` is written when the field starts with a number, whole or not.
inline bool lead_u64(std::string_view s, uint64_t* v) {
  return std::from_chars(s.data(), s.data() + s.size(), *v).ec == std::errc();
}
inline bool whole_u64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

struct U64 {
  using type = uint64_t;
  static bool read(std::string_view s, type* v) { return whole_u64(s, v); }
};
struct Dev {
  using type = uint32_t;
  static bool read(std::string_view s, type* v) {
    uint64_t x = 0;
    if (!whole_u64(s, &x) || x >= kMaxDevice) return false;
    *v = static_cast<type>(x);
    return true;
  }
};
struct Real {
  using type = double;
  static bool read(std::string_view s, type* v) {
    return std::from_chars(s.data(), s.data() + s.size(), *v).ec == std::errc();
  }
};
struct Lead {
  using type = uint64_t;
  static bool read(std::string_view s, type* v) { return lead_u64(s, v); }
};
struct MaybeU64 {
  using type = std::optional<uint64_t>;
  static bool read(std::string_view s, type* v) {
    uint64_t x = 0;
    if (whole_u64(s, &x)) *v = x;
    return true;
  }
};
struct Text {
  using type = std::string_view;
  static bool read(std::string_view s, type* v, size_t keep) {
    *v = keep ? s.substr(0, keep) : s;
    return true;
  }
};
// Read by their handler (collector/ingest/torch_trace.cpp): a bad item is skipped, never the line.
struct Ids : Text {
  static bool read(std::string_view s, type* v) { return Text::read(s, v, 0); }
};
struct Where : Ids {};

}  // namespace field

// ---- a struct per kind of line ----------------------------------------------------------------

#define VRAMTRACE_SIDE_IGNORE(...)
enum class Kind : uint8_t {
#define VRAMTRACE_SIDE_ENUM(Name, tag, since, on_bad, problem, fields) Name,
  VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_ENUM, VRAMTRACE_SIDE_IGNORE, VRAMTRACE_SIDE_IGNORE)
#undef VRAMTRACE_SIDE_ENUM
      kCount
};

#define VRAMTRACE_SIDE_FIELD(kind, name) field::kind::type name{};
#define VRAMTRACE_SIDE_TEXT(name, keep) std::string_view name;
#define VRAMTRACE_SIDE_STRUCT(Name, tag, since, on_bad, problem, fields) \
  struct Name {                                                          \
    static constexpr Kind kKind = Kind::Name;                            \
    fields                                                               \
  };
VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_STRUCT, VRAMTRACE_SIDE_FIELD, VRAMTRACE_SIDE_TEXT)
struct Header {
  VRAMTRACE_SIDE_HEADER(VRAMTRACE_SIDE_FIELD, VRAMTRACE_SIDE_TEXT)
};
#undef VRAMTRACE_SIDE_STRUCT
#undef VRAMTRACE_SIDE_TEXT
#undef VRAMTRACE_SIDE_FIELD

// ---- the table as data ------------------------------------------------------------------------

struct Spec {
  std::string_view tag;
  int since;
  OnBad on_bad;
  const char* problem;
  size_t field_count;  // how many fields it declares
};

#define VRAMTRACE_SIDE_COUNT(...) +1
#define VRAMTRACE_SIDE_SPEC(Name, tag, since, on_bad, problem, fields) \
  Spec{tag, since, OnBad::on_bad, problem, 0 fields},
inline constexpr Spec kSpecs[] = {
    VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_SPEC, VRAMTRACE_SIDE_COUNT, VRAMTRACE_SIDE_COUNT)};
inline constexpr size_t kHeaderFields =
    0 VRAMTRACE_SIDE_HEADER(VRAMTRACE_SIDE_COUNT, VRAMTRACE_SIDE_COUNT);
#undef VRAMTRACE_SIDE_SPEC
#undef VRAMTRACE_SIDE_COUNT

inline constexpr const Spec& spec(Kind k) { return kSpecs[static_cast<size_t>(k)]; }

constexpr bool fields_fit() {
  for (const Spec& s : kSpecs)
    if (s.field_count > kMaxFields) return false;
  return kHeaderFields <= kMaxFields;
}
static_assert(fields_fit(), "a kind of line declares more than kMaxFields fields");

// The kind of a line by its tag (kCount: none).
inline Kind kind_of(std::string_view tag) {
  // One-letter tags by their letter; the others (END) by comparison.
  struct ByLetter {
    Kind kind[128];
    constexpr ByLetter() : kind() {
      for (auto& k : kind) k = Kind::kCount;
      for (size_t i = 0; i < static_cast<size_t>(Kind::kCount); ++i)
        if (kSpecs[i].tag.size() == 1) kind[static_cast<uint8_t>(kSpecs[i].tag[0])] = Kind(i);
    }
  };
  static constexpr ByLetter kByLetter;
  if (tag.size() == 1) {
    const auto letter = static_cast<uint8_t>(tag[0]);
    return letter < 128 ? kByLetter.kind[letter] : Kind::kCount;
  }
  for (size_t i = 0; i < static_cast<size_t>(Kind::kCount); ++i)
    if (kSpecs[i].tag == tag) return Kind(i);
  return Kind::kCount;
}

// ---- decoding ---------------------------------------------------------------------------------

// What decode() made of a line's fields.
enum class Decoded : uint8_t { Ok, Short, Bad };

// A line split at its tabs: field[0] is the tag. Fields past the first kMaxFields + 1 are
// ignored (no kind of line declares them).
struct Split {
  std::string_view field[kMaxFields + 1];
  size_t count = 0;
};

inline Split split(std::string_view line) {
  Split s;
  while (s.count < std::size(s.field)) {
    const size_t tab = line.find('\t');
    s.field[s.count++] = line.substr(0, tab);
    if (tab == std::string_view::npos) break;
    line.remove_prefix(tab + 1);
  }
  return s;
}

namespace detail {
template <typename K>
inline bool read_field(const Split& s, size_t& i, typename K::type* v) {
  return K::read(s.field[i++], v);
}
inline bool read_text(const Split& s, size_t& i, std::string_view* v, size_t keep) {
  return field::Text::read(s.field[i++], v, keep);
}
}  // namespace detail

// Fields 1.. of `s` into `out`, as the table declares them; Bad at the first that does not read.
#define VRAMTRACE_SIDE_READ(kind, name) ok = ok && detail::read_field<field::kind>(s, i, &out.name);
#define VRAMTRACE_SIDE_READ_TEXT(name, keep) ok = ok && detail::read_text(s, i, &out.name, keep);
#define VRAMTRACE_SIDE_DECODE(Name, tag, since, on_bad, problem, fields)   \
  inline Decoded decode(const Split& s, Name& out) {                       \
    if (s.count < 1 + spec(Kind::Name).field_count) return Decoded::Short; \
    size_t i = 1;                                                          \
    bool ok = true;                                                        \
    fields return ok ? Decoded::Ok : Decoded::Bad;                         \
  }
VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_DECODE, VRAMTRACE_SIDE_READ, VRAMTRACE_SIDE_READ_TEXT)
inline Decoded decode(const Split& s, Header& out) {
  if (s.count < 1 + kHeaderFields) return Decoded::Short;
  size_t i = 1;
  bool ok = true;
  VRAMTRACE_SIDE_HEADER(VRAMTRACE_SIDE_READ, VRAMTRACE_SIDE_READ_TEXT)
  return ok ? Decoded::Ok : Decoded::Bad;
}
#undef VRAMTRACE_SIDE_DECODE
#undef VRAMTRACE_SIDE_READ_TEXT
#undef VRAMTRACE_SIDE_READ

}  // namespace vramtrace::side

// The kinds of remedy vramtrace may advise, declared once: VRAMTRACE_REMEDY_KINDS below is the
// one table of every kind's name in report.json (and `whatif --json`), the programs it may be
// offered to, and how the prediction engine predicts it (or why it cannot). From it come the
// RemedyKind enum, the names and the lookup by name. The analysis makes remedies by kind
// (collector/analysis/diagnosis.cpp, retention.cpp, run_diagnosis.cpp) and
// collector/predict/whatif.cpp's replay_remedy() replays them by their `PredictedBy`, one case
// per way of predicting (a switch, so a way without a case is a compiler warning). Adding a
// remedy: docs/ARCHITECTURE.md, "Where to add things".
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

namespace vramtrace::collector {

// Who may be told a remedy: the programs whose terms it is in.
enum class RemedyAudience {
  PyTorch,  // a PyTorch process with the start-up hook's allocator trace
  Native,   // a program whose memory PyTorch's trace does not explain (a CUDA program)
  Jax,      // a JAX process (XLA's memory pool)
  Any,      // worded for the program by the finding it comes from (oom_findings.cpp)
};

// How the prediction engine predicts a remedy: the change replay_remedy() makes to the run
// before it replays its requests through the model of PyTorch's caching allocator.
enum class PredictedBy {
  AllocConf,          // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  HalfBatch,          // the batch scaled by 0.5 (what scales with it: transforms.h)
  Bf16Autocast,       // the hook's fake step in bf16 autocast, else to_bf16_autocast()
  CheckpointModules,  // the hook's fake step checkpointed, else checkpoint_modules()
  WithoutKeptBlocks,  // the blocks kept across iterations (or evaluation's) taken out
  NotReplayed,        // none: the row's reason is the remedy's `not_replayed_because`
};

// The change the start-up hook ran the first step with on fake tensors for a way of predicting
// (its R lines' change), or nullptr when it runs none for it.
constexpr const char* fake_step_change(PredictedBy p) {
  switch (p) {
    case PredictedBy::Bf16Autocast: return "bf16_autocast";
    case PredictedBy::CheckpointModules: return "checkpoint";
    case PredictedBy::AllocConf:
    case PredictedBy::HalfBatch:
    case PredictedBy::WithoutKeptBlocks:
    case PredictedBy::NotReplayed: return nullptr;
  }
  return nullptr;
}

// X(Kind, name, audience, predicted by, why not replayed): name, the kind in report.json;
// why not replayed, the words of a PredictedBy::NotReplayed remedy's `not_replayed_because`
// ("" for the others).
#define VRAMTRACE_REMEDY_KINDS(X)                                                                \
  /* PyTorch, from the categories of the moment (diagnosis.cpp's pytorch_remedies). */           \
  X(MixedPrecision, "mixed_precision", PyTorch, Bf16Autocast, "")                                \
  X(ActivationCheckpointing, "activation_checkpointing", PyTorch, CheckpointModules, "")         \
  X(SmallerBatch, "smaller_batch", PyTorch, HalfBatch, "")                                       \
  X(LeanerOptimizer, "leaner_optimizer", PyTorch, NotReplayed,                                   \
    "another optimizer's requests (its state's layout, its step's temporaries) were not "        \
    "recorded")                                                                                  \
  X(ExpandableSegments, "expandable_segments", PyTorch, AllocConf, "")                           \
  /* Evaluation forwards' graphs, or forwards' graphs kept across iterations (retention.cpp). */ \
  X(NoGrad, "no_grad", PyTorch, WithoutKeptBlocks, "")                                           \
  X(Offload, "offload", PyTorch, NotReplayed,                                                    \
    "memory sharded to other GPUs or moved to the CPU is outside what one device's allocator "   \
    "replays")                                                                                   \
  /* PyTorch, memory kept across iterations (retention.cpp). */                                  \
  X(KeepNumbers, "keep_numbers", PyTorch, NotReplayed,                                           \
    "which of the growing site's tensors the program still reads is not known")                  \
  X(DetachState, "detach_state", PyTorch, NotReplayed, "not a change of PyTorch's requests")     \
  X(AccumulateNumbers, "accumulate_numbers", PyTorch, WithoutKeptBlocks, "")                     \
  X(DetachOutputs, "detach_outputs", PyTorch, WithoutKeptBlocks, "")                             \
  /* A native program's, in CUDA's terms (diagnosis.cpp's native_remedies). */                   \
  X(FreePerIteration, "free_per_iteration", Native, NotReplayed,                                 \
    "not a change of PyTorch's requests")                                                        \
  X(PoolRelease, "pool_release", Native, NotReplayed, "not a change of PyTorch's requests")      \
  X(SmallerWorkingSet, "smaller_working_set", Native, NotReplayed,                               \
    "not a change of PyTorch's requests")                                                        \
  /* JAX (run_diagnosis.cpp). */                                                                 \
  X(XlaFraction, "xla_fraction", Jax, NotReplayed, "not a change of PyTorch's requests")         \
  /* The fatal OOM's finding's own advice where no remedy was looked for (PyTorch without its    \
     allocator trace): report.json names it by the finding's kind (Remedy::finding). */          \
  X(FindingAdvice, "", Any, NotReplayed, "not a change of PyTorch's requests")

#define VRAMTRACE_REMEDY_ENUM(Kind, name, audience, predicted_by, not_replayed) Kind,
enum class RemedyKind { VRAMTRACE_REMEDY_KINDS(VRAMTRACE_REMEDY_ENUM) };
#undef VRAMTRACE_REMEDY_ENUM

struct RemedyKindRow {
  RemedyKind kind;
  const char* name;
  RemedyAudience audience;
  PredictedBy predicted_by;
  const char* not_replayed_because;
};

#define VRAMTRACE_REMEDY_ROW(Kind, name, audience, predicted_by, not_replayed) \
  {RemedyKind::Kind, name, RemedyAudience::audience, PredictedBy::predicted_by, not_replayed},
inline constexpr RemedyKindRow kRemedyKinds[] = {VRAMTRACE_REMEDY_KINDS(VRAMTRACE_REMEDY_ROW)};
#undef VRAMTRACE_REMEDY_ROW

inline constexpr size_t kRemedyKindCount = std::size(kRemedyKinds);

constexpr const RemedyKindRow& remedy_kind_row(RemedyKind k) {
  return kRemedyKinds[static_cast<size_t>(k)];
}
constexpr const char* remedy_kind_name(RemedyKind k) { return remedy_kind_row(k).name; }

// The kind named `name` in report.json; nullopt for a name not in the table (and for a
// finding's kind, which names FindingAdvice by its finding).
constexpr std::optional<RemedyKind> remedy_kind_named(std::string_view name) {
  if (name.empty()) return std::nullopt;
  for (const RemedyKindRow& r : kRemedyKinds)
    if (name == r.name) return r.kind;
  return std::nullopt;
}

}  // namespace vramtrace::collector

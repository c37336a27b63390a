// The run's diagnosis as the report states it: the moment that matters (the first fatal OOM,
// else the device whose peak came closest to its capacity), the effective limit then, the cause
// (the fatal OOM's likeliest finding, or memory kept across iterations, or a growing site),
// the growth, and the remedies ranked by what each saves, each with the peak it leads to and,
// where the allocator's model can apply it, its replay of the run's requests. The remedies
// themselves are collector/analysis/diagnosis.h's and collector/analysis/retention.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/predict/whatif.h"

namespace vramtrace::collector {

// A measured figure behind the cause, in words ("growth per iteration").
struct CauseFigure {
  std::string label;
  uint64_t bytes = 0;
};

struct DiagnosisCause {
  std::string kind;  // a finding's kind (oom_findings.h), kept_graph, kept_outputs, growth
  std::string title;
  std::vector<CauseFigure> evidence;
};

struct DiagnosisGrowth {
  std::string kind;  // growth, kept_graph, kept_outputs
  uint64_t bytes_per_iteration = 0, kept_bytes = 0;
  std::optional<int64_t> iterations;  // kept across iterations: how many iterations kept
};

// A remedy's replay through the model of PyTorch's caching allocator (collector/predict/whatif.h).
struct RemedyReplay {
  bool fits = false;
  uint64_t reserved_peak_bytes = 0;
  uint64_t limit_bytes = 0;  // the device's limit, or the per-process fraction's when tighter
  bool up_to_recorded_oom = false;  // fits as far as the run got (it ended at its own OOM)
  std::optional<WhatIfOom> oom;     // the first request it could not serve
  // The run's first step never ended and the start-up hook predicted it: the replay is of the
  // completed step.
  std::optional<Completion> completion;
  // The change weighed on the step run on fake tensors with it and without it.
  std::optional<FakeStepChange> fake_step_change;
  // Why it was not (WhatIfResult::not_weighed_because).
  std::string not_weighed_because;
};

struct RemedyOutcome {
  Remedy remedy;
  // The peak with the remedy. PyTorch's: the replay's (PyTorch's segments plus the memory
  // outside them at their most); a native program's: the moment's memory less its saving unless
  // the remedy knows better; none for a remedy whose effect is not figured (XLA's pool fraction)
  // or that cannot be replayed.
  std::optional<uint64_t> predicted_peak;
  std::optional<RemedyReplay> replayed;
  std::string not_replayed;  // why a PyTorch remedy has no replay ("" when it has one)
};

// What a remedy leads to, as every view says it (report.json's remedies[].outcome): the peak
// with it as the bound it is ("peak with it: at least 6.85 GiB"), its replay through PyTorch's
// allocator, how its change was weighed, whether memory still grows; or why it was not
// replayed. "" for an OOM finding's advice, which measures nothing.
std::string outcome_text(const RemedyOutcome& o);

// Module names as a remedy's title lists them: a run of numbered siblings (a model's repeated
// blocks: "transformer.h.0" to "transformer.h.11") as its first and last and how many, else
// every name, comma-separated.
std::string module_list_text(const std::vector<std::string>& names);

struct Diagnosis {
  bool oom = false;  // the verdict: a fatal OOM, else the peak
  uint64_t fatal_ooms = 0, recovered_ooms = 0;
  // The OOM the diagnosis is about: its place in report.json's `oom` (every process's OOMs, the
  // processes in order), and whether it ended its process. None at a peak.
  std::optional<size_t> oom_index;
  bool oom_fatal = false;
  // The moment's process and device; none (and nothing below) when no device had memory.
  std::optional<uint32_t> device;
  uint64_t pid = 0;
  EffectiveLimit limit;  // its kind empty when no device's capacity is known
  uint64_t held_bytes = 0, requested_bytes = 0;
  // The failed request as the program's allocator asked for it (PyTorch's block, which its
  // driver call may round up; else the driver's request), and the out-of-memory errors that
  // were not recovered on the moment's device, every process's: what the verdict's lines say.
  uint64_t asked_bytes = 0;
  uint64_t ooms_on_device = 0;
  int64_t headroom_bytes = 0;  // the limit less what was held (negative: past it)
  std::optional<DiagnosisCause> cause;
  std::optional<DiagnosisGrowth> growth;
  // Only those that fit the program: PyTorch's for a PyTorch process, CUDA's for a native one;
  // where none was looked for (PyTorch without its allocator trace), the fatal OOM's findings'
  // advice, which oom_findings.h words for the program. None: no remedy and no OOM.
  std::optional<std::vector<RemedyOutcome>> remedies;
  std::optional<CategoryBytes> categories;  // PyTorch's memory at the moment
  struct XlaFigures {
    uint64_t peak_in_use_bytes = 0, limit_bytes = 0;
  };
  std::optional<XlaFigures> xla_pool;  // JAX: XLA's pool
};

}  // namespace vramtrace::collector

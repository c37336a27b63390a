// Why a job ran out (or how close it came) and what to do, from this run's own figures: the
// effective limit the process ran against (the card, PyTorch's per-process memory fraction,
// memory other processes held), and remedies ranked by the bytes each would save at the
// moment that mattered (the fatal OOM, else the peak), computed from the memory's categories.
// Each remedy keeps its assumption; none is offered that the figures do not support.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/categories.h"
#include "collector/model/model.h"
#include "collector/model/torch_memory.h"
#include "collector/remedy_kinds.h"

namespace vramtrace::collector {

struct EffectiveLimit {
  uint64_t bytes = 0;
  std::string kind;   // device, per_process_fraction, other_processes
  std::string title;  // "PyTorch's per-process memory fraction (0.1144 of 139.80 GiB)"
};

// The tightest limit the process could see on `device`: the card's capacity, PyTorch's
// per-process fraction (from the hook), and at an OOM what other processes held then.
EffectiveLimit effective_limit(uint64_t device_total, const TorchMemory* tm, uint32_t device,
                               std::optional<uint64_t> held_by_others);

struct Remedy {
  RemedyKind kind = RemedyKind::FindingAdvice;  // collector/remedy_kinds.h
  std::string title;                            // one line, imperative
  uint64_t saves_bytes = 0;
  std::string assumption;
  std::string how;  // the code or setting
  // The job died in its first step: the saving is measured against what that partial step
  // held, so the predicted peak is a floor that a whole step will exceed.
  bool lower_bound = false;
  // The job's memory grows across iterations and this remedy does not stop that.
  bool leaves_growth = false;
  // The peak with the remedy, when it is known better than the moment less the saving.
  std::optional<uint64_t> predicted_peak{};
  // When only a range is known: predicted_peak is its low end, this its high end.
  std::optional<uint64_t> predicted_peak_high{};
  bool upper_bound = false;            // predicted_peak is a ceiling the remedy will stay under
  std::vector<std::string> modules{};  // activation_checkpointing: the modules to checkpoint
  std::string finding{};               // FindingAdvice: its finding's kind ("fragmentation")

  // Its kind as report.json names it.
  std::string name() const {
    return kind == RemedyKind::FindingAdvice ? finding : remedy_kind_name(kind);
  }
};

// The one no_grad remedy, worded for what the forwards' graphs were kept by: evaluation
// forwards run with autograd on (their activations `bytes`), forwards whose graphs are kept
// across iterations (`bytes` kept), or a state fed back into the next forward (`bytes` kept,
// `activations` of it saved by autograd).
enum class NoGradFor { EvaluationForwards, KeptGraphs, CarriedState };
Remedy no_grad_remedy(NoGradFor why, uint64_t bytes, uint64_t activations = 0);

// A module's (or a group of modules') bytes, and where it comes in the model: the hook numbers
// modules in the order of their first call, so that lists read as the model runs
// (encoder_layer_2 before encoder_layer_10), never as text.
struct ModuleBytes {
  std::string name;
  uint64_t bytes = 0;
  uint32_t first_call = 0;  // the module's id (a group's: its first member's)
};

struct RemedyInput {
  CategoryBytes at{};             // the device's memory by category at the moment
  uint64_t total = 0;             // what the process held then (the sum of `at`)
  uint64_t limit = 0;             // the effective limit
  uint64_t request = 0;           // the failed request (0 at a peak)
  bool fragmented = false;        // the allocator's free memory was there, in pieces too small
  uint64_t eval_activations = 0;  // activations made by evaluation forwards with grad on
  std::vector<ModuleBytes> activations_by_module;  // largest first, ties in the model's order
  bool autocast = false;                           // forwards already ran under torch.autocast
  bool partial_step = false;  // the moment came before the first step ended (a first-step OOM)
  std::string param_dtype;    // the parameters' dtype ("float32")
  uint64_t optimizer_state_per_param = 0;  // tensors of state per parameter (2 for Adam)
  std::string progress;  // partial_step: how far the first step got (first_step_progress)
  std::string command;   // the command that ran, to measure a remedy with
};

// Ranked, largest saving first; empty when nothing the figures support would help.
std::vector<Remedy> pytorch_remedies(const RemedyInput& in);

// How far a job that died in its first step got, at `t`: "in its first forward, in
// layer3.0.bn1, after 31 of 161 modules had run" ("" without the hook's module marks).
std::string first_step_progress(const TorchMemory& tm, uint64_t t);

// A native (non-PyTorch) program's remedies in CUDA's terms: memory kept at a growing site
// (`growth_site`, `grown_bytes` kept since it began), or a working set past the limit.
struct NativeRemedyInput {
  std::string growth_site;
  uint64_t grown_bytes = 0, bytes_per_iteration = 0;
  uint64_t needed = 0;  // held + the failed request (0 at a peak)
  uint64_t peak = 0;    // the device's peak (the moment, when there was no OOM)
  uint64_t limit = 0;
  bool fragmented = false;  // a pool's free memory was there, in pieces too small
};
std::vector<Remedy> native_remedies(const NativeRemedyInput& in);

// The moment whose memory the categories explain. A caching allocator's reserved memory only
// grows, so the driver's peak is when its last segment was made (often a small one in the
// optimizer step, with the cache full of what the backward freed): the allocator's in-use
// peak is when the memory was most needed, and what it held then is what the remedies cut.
struct PeakMoment {
  uint64_t time_ns = 0;
  uint64_t device_bytes = 0;  // what the process held on the device then
  std::string moment;         // "the device's peak", "PyTorch's in-use peak"
  // Which of the two: the views say what the blocks shown are by this, never by the words.
  bool allocator_in_use_peak = false;
};
PeakMoment peak_moment_of(const TorchMemory& tm, const DeviceModel& d);

// The process's device memory by category at its peak moment, and at an OOM (what it held
// when the request failed). `stacks` splits the memory outside PyTorch by library.
CategoryBytes categories_at_peak(const TorchMemory& tm, const DeviceModel& d, const PeakMoment& pm,
                                 StackResolver* stacks);
CategoryBytes categories_at_oom(const TorchMemory& tm, const OomEvent& o, StackResolver* stacks);

// Activations and temporaries live at `t` by module (full name), largest first, modules of
// equal bytes in the model's order.
std::vector<ModuleBytes> live_by_module(const TorchMemory& tm, uint32_t device, uint64_t t,
                                        bool activations_only);

// Activations grouped at the depth where they split into several modules (layer1..layer4 of
// a ResNet, transformer.h.0..11 of a GPT-2): the candidates for checkpointing, largest first,
// groups of equal bytes in the model's order.
std::vector<ModuleBytes> checkpoint_groups(const std::vector<ModuleBytes>& mods, uint64_t total);

// Tensors of optimizer state per parameter (2 for Adam), the most any parameter has.
uint64_t state_tensors_per_param(const TorchMemory& tm);

// What the remedies need of the moment `t` on `device`: `at` its categories, the effective
// limit, the failed request (0 at a peak) and whether the allocator's free memory was there in
// pieces too small (fragmentation).
RemedyInput remedy_input(const TorchMemory& tm, uint32_t device, uint64_t t,
                         const CategoryBytes& at, uint64_t limit, uint64_t request,
                         bool fragmented);

}  // namespace vramtrace::collector

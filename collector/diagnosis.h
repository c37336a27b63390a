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

#include "collector/torch_memory.h"

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
  std::string kind;   // mixed_precision, activation_checkpointing, smaller_batch, ...
  std::string title;  // one line, imperative
  uint64_t saves_bytes = 0;
  std::string assumption;
  std::string how;    // the code or setting
};

struct RemedyInput {
  CategoryBytes at{};         // the device's memory by category at the moment
  uint64_t total = 0;         // what the process held then (the sum of `at`)
  uint64_t limit = 0;         // the effective limit
  uint64_t request = 0;       // the failed request (0 at a peak)
  bool fragmented = false;    // the allocator's free memory was there, in pieces too small
  uint64_t eval_activations = 0;  // activations made by evaluation forwards with grad on
  std::vector<std::pair<std::string, uint64_t>> activations_by_module;  // largest first
  bool autocast = false;      // forwards already ran under torch.autocast
  bool partial_step = false;  // the moment came before the first step ended (a first-step OOM)
  std::string param_dtype;    // the parameters' dtype ("float32")
  uint64_t optimizer_state_per_param = 0;  // tensors of state per parameter (2 for Adam)
};

// Ranked, largest saving first; empty when nothing the figures support would help.
std::vector<Remedy> pytorch_remedies(const RemedyInput& in);

}  // namespace vramtrace::collector

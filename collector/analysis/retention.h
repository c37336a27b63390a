// What a PyTorch program keeps across iterations: memory made in an iteration's forward that
// is still live iterations later. Two causes look alike in a growth curve and need different
// fixes, so they are told apart here:
//   - a kept autograd graph: forwards that no backward consumed (evaluation with autograd on,
//     `total += loss`, a list of losses) whose activations, across many modules, stay live;
//   - kept outputs: a forward's outputs (logits, hidden states) held past the step whose
//     backward freed the rest of the graph (`outputs.append(out.logits)`).
// Either may come through a carried state: a module's outputs fed back as its next forward's
// input (an RNN's (h, c) chunk after chunk), which with autograd on links every forward's
// graph to the one before it; the hook marks such a forward, and the fix is to detach the state.
// The figures are the blocks' own lives (PyTorch's allocator trace) against the hook's
// iterations and phases, so they hold whatever the allocator's cache does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/model/allocation.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

enum class KeptKind { Graph, Outputs };
const char* kept_kind_name(KeptKind k);  // "kept_graph", "kept_outputs"

struct KeptAcrossIterations {
  KeptKind kind = KeptKind::Graph;
  // What one iteration's forward leaves behind (the median of the iterations that keep).
  uint64_t bytes_per_iteration = 0;
  // What the earlier iterations' forwards still held at the moment: what the fix gives back.
  uint64_t kept_bytes = 0;
  int64_t iterations_keeping = 0;  // iterations whose forward memory outlived the next one
  int64_t iterations = 0;          // iterations begun by the moment
  int64_t first_iteration = 0;     // the first that kept
  bool backward = false;           // a backward ran in those iterations (training)
  bool evaluation = false;         // their forwards ran in eval() mode
  // Kept bytes by module (the innermost module that made them), largest first.
  std::vector<std::pair<std::string, uint64_t>> modules;
  std::string site;  // the line that called the forwards ("eval.py:25"), "" when unknown
  // The kept blocks, as indices into the trace's blocks (to tell them from leak suspects).
  std::vector<size_t> blocks;
  // PyTorch's blocks in use at the moment, and the most they reached up to it had nothing made
  // by an earlier iteration's forward stayed live (`peak_without_kept`: the fix that frees a
  // forward's memory with its iteration), or nothing older than the iteration before
  // (`peak_keeping_previous`: `total += loss.item()` with autograd still on, where `out` holds
  // the previous forward's graph until the next forward returns).
  uint64_t in_use = 0, peak_without_kept = 0, peak_keeping_previous = 0;
  // Without autograd: no graph of an earlier forward, nor the activations the current one saves
  // for backward, but the previous forward's outputs (what it made from its last module call
  // on) held until the next forward returns.
  uint64_t peak_without_graphs = 0;
  // The same with the current forward's own graph: one forward with autograd, nothing kept.
  uint64_t peak_one_graph = 0;
  // Of kept_bytes, the activations autograd saved (made with autograd on before the forward's
  // last module call, outlived the forward; not its outputs): what a forward under
  // torch.no_grad() would not have made.
  uint64_t kept_activations = 0;
  // A carried state: the forwards of `state_module` (its type: "LSTM") got back, as inputs,
  // `state_tensors` tensors its previous forward returned, in most iterations that kept;
  // `state_lstm`: the model has an LSTM (two tensors are then its (h, c)).
  bool carried_state = false;
  std::string state_module, state_type;
  uint32_t state_tensors = 0;
  bool state_lstm = false;
};

// Memory kept across iterations on `device` at `t`: made in the forward of an iteration i and
// still live at `t` while iteration i + 2 has begun by then (the iteration right after may
// still hold its predecessor's output legitimately: `out` is rebound only when the next
// forward returns). None when fewer than that are kept, or too little to matter.
std::optional<KeptAcrossIterations> kept_across_iterations(const TorchMemory& tm, uint32_t device,
                                                           uint64_t t);

// Moves the kept blocks out of `suspects` (what was live at the end on `device`) and returns
// them: memory a program keeps on purpose or by mistake across iterations, not leaked.
std::vector<Allocation> take_kept(const TorchMemory& tm, const KeptAcrossIterations& k,
                                  uint32_t device, std::vector<Allocation>& suspects);

// "Each evaluation forward's autograd graph stays alive: 10.17 GiB per iteration ..."
std::string kept_title(const KeptAcrossIterations& k);

// A PyTorch program's growth at `site` that is not its forwards' (a list of tensors made between
// the phases, a cache): keep numbers or host copies instead.
Remedy growth_remedy(const std::string& site, uint64_t bytes_per_iteration, uint64_t grown_bytes);

// The fixes in PyTorch's words, each with the peak it leads to: the blocks' peak without the
// kept memory plus `overhead` (what the process held beyond its blocks at the moment: the
// allocator's cache, the context, libraries).
std::vector<Remedy> kept_remedies(const KeptAcrossIterations& k, uint64_t overhead);

}  // namespace vramtrace::collector

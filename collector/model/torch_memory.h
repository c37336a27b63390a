// What PyTorch's memory is and whose it is: every block of the caching allocator classified
// into a category (parameters, gradients, optimizer state, activations, temporaries, inputs),
// with the phase (forward, backward, optimizer step, evaluation), the iteration, the nn.Module
// that was running and the user's line that called it. Fed by the start-up hook's context
// (collector/ingest/torch_trace.h: module calls, phases, named storages) and the allocator's
// blocks; the rest of the device's memory (the allocator's cache, libraries' workspaces, NCCL,
// other memory outside PyTorch) is split by the driver allocations live at the moment
// (collector/analysis/categories.h, which sums a moment by category).
//
// How a block is classified, first rule that holds:
//   0. it lies in a segment of a private pool (a CUDA graph's capture pool, a torch.cuda.MemPool)
//      that the hook listed at the dump, and was made after that segment: private pool, for
//      its whole life (what a graph's replays use is fixed at capture, whatever the tensors
//      are); the pool's free bytes count there too, not as the allocator's cache;
//   1. a named storage (parameter, buffer, .grad, optimizer state) live in it: that;
//   2. made in a training forward: kept past the end of that forward -> activations (saved
//      for backward), freed inside it -> temporaries; evaluation forward with grad on: the
//      same (a graph kept alive); under no_grad: kept past it -> inputs and data (outputs);
//   3. made in the backward pass: kept past its end -> gradients, else temporaries;
//   4. made in the optimizer step: kept past its end -> optimizer state, else temporaries;
//   5. made outside all of these -> inputs and data (batches, targets, anything the script
//      holds between steps); made while a tensor was moved to the GPU (Tensor.to, .cuda), with
//      the user's line that moved it.
// A phase the program died in (an OOM in the forward) ends with the trace: what it made and
// still held then was kept past it (the forward's activations so far), what it freed was not.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collector/ingest/torch_trace.h"

namespace vramtrace::collector {

struct ProcessModel;
struct DeviceModel;
struct Allocation;

enum class Category : uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Temporaries,
  Inputs,
  Workspaces,
  Communication,
  PrivatePool,
  AllocatorCache,
  OutsidePytorch,
  Unclassified,
  kCount
};
inline constexpr size_t kCategories = static_cast<size_t>(Category::kCount);
const char* category_key(Category c);    // "optimizer_state"
const char* category_title(Category c);  // "optimizer state"

enum class TorchPhase : uint8_t { None, Forward, Backward, Optimizer, Evaluation };
const char* phase_key(TorchPhase p);

struct BlockInfo {
  Category category = Category::Inputs;
  TorchPhase phase = TorchPhase::None;
  int64_t iteration = -1;
  uint32_t module = 0;  // module id (TorchContext::modules[id - 1]); 0: none
  uint32_t site = 0;    // site id of the phase's call; 0: unknown
  int64_t label = -1;   // index into TorchContext::labels
};

using CategoryBytes = std::array<uint64_t, kCategories>;

// One of PyTorch's private pools on a device, as the hook saw it at the dump.
struct PrivatePool {
  uint64_t pool_id[2] = {0, 0};
  bool cuda_graph = false;           // a CUDA graph's capture pool
  uint64_t segments = 0, bytes = 0;  // its segments then
  uint64_t in_use_bytes = 0;         // its blocks live then
};

// A phase as the report draws it: forward, backward, optimizer step or evaluation.
struct PhaseSpan {
  TorchPhase phase = TorchPhase::None;
  uint64_t start_ns = 0, end_ns = 0;  // end UINT64_MAX: still open when the trace ended
  int64_t iteration = -1;
  uint32_t site = 0;
  bool grad = true;  // autograd on (an evaluation forward with grad on keeps its graph)
};

class TorchMemory {
 public:
  explicit TorchMemory(TorchContext ctx);

  const TorchContext& context() const { return ctx_; }
  const std::vector<BlockInfo>& info() const { return info_; }  // by ctx.blocks index
  const std::vector<PhaseSpan>& phases() const { return phases_; }
  // Iteration starts: the first forward, then the end of each step of the first optimizer
  // (exact); without an optimizer, each forward of the first model called. Empty: no marks.
  const std::vector<uint64_t>& iterations() const { return iterations_; }
  const std::string& iteration_source() const { return iteration_source_; }
  uint64_t optimizer_steps() const { return steps_; }
  bool autocast() const { return autocast_; }  // some forward ran under torch.autocast

  // At time `t`: the iteration (-1 before the first), the phase running (null outside all),
  // the innermost module running (0: none).
  int64_t iteration_at(uint64_t t) const;
  const PhaseSpan* phase_at(uint64_t t) const;
  uint32_t module_at(uint64_t t) const;

  // The block of `device` at `address` made at `alloc_ns` (a block of the model), or null.
  const BlockInfo* block(uint32_t device, uint64_t address, uint64_t alloc_ns) const;
  // Blocks of `device` live at `t`, as indices into ctx.blocks.
  std::vector<size_t> live_at(uint32_t device, uint64_t t) const;
  // What the allocator had reserved from the driver on `device` at `t`.
  uint64_t reserved_at(uint32_t device, uint64_t t) const;
  // The moment to read the allocator's state for a driver allocation made at `t` (the
  // device's peak): when it was the allocator's segment at `address` (or, with expandable
  // segments, the one it mapped right then), just after the block the segment was made for
  // (the allocator records both microseconds after the driver); otherwise `t`. Events, not a
  // time window: what the program did afterwards does not count.
  // Where the driver's address is not the segment's (expandable segments, or unknown: 0), the
  // first segment the allocator added from a microsecond before `t` up to `until` (the driver's
  // next change: the allocator records its segment before the driver makes another; 0: a
  // millisecond after `t`).
  uint64_t after_segment(uint32_t device, uint64_t address, uint64_t t, uint64_t until = 0) const;
  // Whether a driver allocation at `address` was one of the allocator's segments.
  bool is_segment(uint32_t device, uint64_t address) const;
  // What the private pools' segments held at `t` (their blocks and free bytes alike).
  uint64_t private_reserved_at(uint32_t device, uint64_t t) const;
  // The private pools of `device` at the dump, in the order the hook listed their segments.
  std::vector<PrivatePool> private_pools(uint32_t device) const;
  // When the first block at `address` made at `from_ns` or later was made (UINT64_MAX: none).
  uint64_t first_block_at(uint32_t device, uint64_t address, uint64_t from_ns) const;
  // Whether a block (one of info()) lies in a CUDA graph's private pool: the graph's own memory,
  // which each replay uses again.
  bool in_cuda_graph_pool(const BlockInfo& b) const;

  // Blocks' bytes by category at each of `times` (sorted), plus in [AllocatorCache] what the
  // allocator had reserved then (the caller subtracts the blocks) and in [PrivatePool] what
  // the private pools' segments held then (their blocks within): one sweep of the blocks.
  std::vector<CategoryBytes> series(uint32_t device, const std::vector<uint64_t>& times) const;

  // "layer3.2.conv2 (Conv2d) at train.py:41", "parameter layer1.0.conv1.weight at train.py:12"
  // (the line that moved it to the GPU), "backward at train.py:41".
  std::string describe(const BlockInfo& b) const;
  std::string site_text(uint32_t site) const;  // "train.py:41", "" when unknown
  std::string module_name(uint32_t module) const;

 private:
  void find_phases();
  void classify();
  void classify_by_phase();
  void classify_named();
  void find_private_pools();  // before classify(): which blocks are the pools'
  // Blocks' allocations (+index+1) and frees (-(index+1)) in time order; all devices when
  // `device` is null.
  std::vector<std::pair<uint64_t, int64_t>> lifetime_events(const uint32_t* device) const;
  TorchContext ctx_;
  std::vector<BlockInfo> info_;
  std::vector<PhaseSpan> phases_;
  std::vector<PhaseSpan> moves_;  // tensors moved to the GPU outside the phases (phase None)
  std::vector<uint64_t> iterations_;
  std::string iteration_source_;
  uint64_t steps_ = 0;
  bool autocast_ = false;
  std::vector<std::vector<size_t>> by_address_;  // per device slot: block indices by address
  const std::vector<size_t>* by_address(uint32_t device) const;  // null: no block there
  // The first of `v` (block indices by address) at `address` or above.
  std::vector<size_t>::const_iterator first_at(const std::vector<size_t>& v,
                                               uint64_t address) const;
  std::vector<uint32_t> devices_;
  // Private pools' segments (ctx.pool_segments) with the time each was made (the allocator's
  // segment_alloc at its address; 0 when the trace lost it), and whether each block is in one.
  std::vector<uint64_t> pool_segment_ns_;
  std::vector<int64_t> pool_segment_of_;  // by block: index into ctx.pool_segments, or -1
  // Between its traced iterations the hook marks only the outermost forwards: each of their
  // blocks takes its module from the latest traced forward of the same model and kind, the
  // block at the same position in allocation order, while the sizes agree.
  struct Template {
    uint64_t key = 0;                                   // root module id * 16 + forward kind
    std::vector<std::pair<uint64_t, uint32_t>> blocks;  // bytes, innermost module
  };
  struct UntracedForward {
    uint64_t start_ns = 0, end_ns = UINT64_MAX;
    int64_t tmpl = -1;  // index into templates_; -1: none traced yet
  };
  std::vector<Template> templates_;
  std::vector<UntracedForward> untraced_;
  // The module of a block (or failed request) that is the `k`-th allocation of `f`, when the
  // allocations before it matched the template's sizes; 0 when unknown.
  uint32_t aligned_module(const UntracedForward& f, size_t k) const;
};

}  // namespace vramtrace::collector

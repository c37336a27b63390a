// What-if: replays a recorded run's PyTorch allocator requests (every block's malloc and free,
// per device, in order, with its stream) through a model of PyTorch's CUDACachingAllocator
// under other settings (PYTORCH_CUDA_ALLOC_CONF), another limit or a scaled batch, with the
// process's memory outside PyTorch's segments as fixed background over time. It answers
// "would this run have fit with expandable_segments / under 24 GiB / at 1.5x the batch"
// without running it again.
//
// The model follows c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator) of PyTorch 2.x
// (rules read from the 2.5 to 2.11 sources; see docs/WHATIF.md for the list and for what is
// left out): rounding (round_size, roundup_power2_next_division), the small and large pools
// (get_pool, get_allocation_size), best fit by (stream, size) (get_free_block), splitting
// (should_split, alloc_found_block), merging (free_block, try_merge_blocks), the order of
// attempts when no cached block fits (malloc: garbage_collect_cached_blocks, alloc_block,
// release_available_cached_blocks, release_cached_blocks), the per-process fraction
// (setMemoryFraction's allowed_memory_maximum) and expandable segments
// (find_expandable_block, map_block, unmap_block, ExpandableSegment).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace vramtrace::collector {

struct ProcessModel;
struct TorchContext;
class TorchMemory;

// The allocator's constants (CUDACachingAllocator.cpp).
inline constexpr uint64_t kMinBlockSize = 512;        // every size rounded to 512 B
inline constexpr uint64_t kSmallSize = 1048576;       // the largest request of the small pool
inline constexpr uint64_t kSmallBuffer = 2097152;     // small pool segments (and pages)
inline constexpr uint64_t kLargeBuffer = 20971520;    // large segments for requests < 10 MiB
inline constexpr uint64_t kMinLargeAlloc = 10485760;  // from here on: their own segment
inline constexpr uint64_t kRoundLarge = 2097152;      // ... rounded up to 2 MiB
// roundup_power2_divisions has one value per power-of-two interval from 1 MiB up to 64 GiB
// (CUDAAllocatorConfig: kRoundUpPowerOfTwoIntervals).
inline constexpr size_t kRoundUpIntervals = 16;

// PYTORCH_CUDA_ALLOC_CONF as the allocator reads it (CUDAAllocatorConfig::parseArgs).
struct AllocatorSettings {
  uint64_t max_split_size = UINT64_MAX;                                // max_split_size_mb
  uint64_t max_non_split_rounding = kLargeBuffer;                      // max_non_split_rounding_mb
  std::array<uint64_t, kRoundUpIntervals> roundup_power2_divisions{};  // 0: none
  double garbage_collection_threshold = 0;                             // 0: off
  bool expandable_segments = false;
  std::optional<double> per_process_memory_fraction;  // as set_per_process_memory_fraction
  // The divisions for a request of `size` bytes (CUDAAllocatorConfig::roundup_power2_divisions).
  uint64_t divisions_for(uint64_t size) const;
};

// The keys PYTORCH_CUDA_ALLOC_CONF knows; those that do not change what the device's memory
// holds (backend, release_lock_on_cudamalloc, pinned_*) are accepted and have no effect here.
const std::vector<std::string>& alloc_conf_keys();
// Applies CONF ("expandable_segments:True,max_split_size_mb:128") over `s`. False with one line
// in *error on an unknown key (listing the known ones) or a bad value, `s` then unchanged.
// backend:cudaMallocAsync is refused: a different allocator.
bool parse_alloc_conf(const std::string& conf, AllocatorSettings* s, std::string* error);
std::string describe_settings(const AllocatorSettings& s);  // "expandable_segments:True,..."

// The allocator's state at a moment (for the OOM: what the request met).
struct AllocatorState {
  uint64_t reserved_bytes = 0;     // segments (mapped pages with expandable segments)
  uint64_t allocated_bytes = 0;    // blocks handed out, as rounded
  uint64_t cached_free_bytes = 0;  // reserved, not handed out
  uint64_t largest_free_block = 0;
  uint64_t free_blocks = 0, segments = 0;
  uint64_t background_bytes = 0;  // the process's memory outside PyTorch then
};

// One device's DeviceCachingAllocator (the default pools; private pools are not modelled).
// The device gives out memory while reserved + background stays within `device_limit`;
// `fraction_limit`, when set, is allowed_memory_maximum (PyTorch's own check on what it
// reserves, not counting the background). Addresses are the model's own.
class CachingAllocatorModel {
 public:
  CachingAllocatorModel(AllocatorSettings settings, uint64_t device_limit,
                        std::optional<uint64_t> fraction_limit,
                        uint64_t device_total = 0);  // for the expandable segments' address space
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // The memory outside PyTorch from now on (other libraries' driver allocations).
  void set_background(uint64_t bytes) { background_ = bytes; }
  // torch.cuda.caching_allocator malloc of `size` bytes on `stream`: a handle, or -1 when the
  // allocator raises OutOfMemoryError (after every retry it makes).
  int64_t malloc(uint64_t size, uint64_t stream);
  void free(int64_t handle);
  void empty_cache();  // torch.cuda.empty_cache()

  // round_size: the bytes a request of `size` takes from a block.
  uint64_t round_size(uint64_t size) const;
  uint64_t block_size(int64_t handle) const;     // the block's size (with a piece not split off)
  uint64_t block_address(int64_t handle) const;  // in the model's address space
  uint64_t reserved() const { return total_allocated_memory_; }
  uint64_t peak_reserved() const { return peak_reserved_; }
  uint64_t allocated() const { return allocated_; }
  uint64_t peak_allocated() const { return peak_allocated_; }
  uint64_t segment_allocs() const { return segment_allocs_; }  // cudaMalloc / cuMemMap calls
  uint64_t segment_frees() const { return segment_frees_; }
  AllocatorState state() const;
  const AllocatorSettings& settings() const { return s_; }

  struct Block;
  struct Pool;
  struct Segment;

 private:
  struct Params;
  bool get_free_block(Params& p);
  void garbage_collect_cached_blocks();
  bool alloc_block(Params& p);
  bool release_available_cached_blocks(const Params& p);
  void release_cached_blocks();
  void release_blocks(Pool& pool);
  void release_block(Block* b);
  void unmap_block(Block* b);
  void release_expandable_segment(Block* b);
  Block* try_allocate_expandable_block(uint64_t stream, Pool& pool, uint64_t size);
  Block* find_expandable_block(uint64_t stream, Pool& pool, uint64_t size);
  bool map_block(Block* b, uint64_t size);
  bool should_split(const Block* b, uint64_t size) const;
  Block* alloc_found_block(Params& p, uint64_t orig_size, bool split);
  void free_block(Block* b);
  uint64_t try_merge_blocks(Block* dst, Block* src, Pool& pool);
  bool device_has(uint64_t bytes) const {
    return total_allocated_memory_ + background_ + bytes <= device_limit_;
  }
  void grew(uint64_t bytes);
  Block* new_block();
  void delete_block(Block* b);

  AllocatorSettings s_;
  uint64_t device_limit_;
  std::optional<uint64_t> fraction_limit_;
  uint64_t device_total_;
  uint64_t background_ = 0;
  uint64_t total_allocated_memory_ = 0, peak_reserved_ = 0;
  uint64_t allocated_ = 0, peak_allocated_ = 0;
  uint64_t segment_allocs_ = 0, segment_frees_ = 0;
  uint64_t live_segments_ = 0;                // cudaMalloc'd segments held
  uint64_t next_address_ = 1ull << 56;        // cudaMalloc's and cuMemAddressReserve's, downwards
  uint64_t next_small_address_ = 1ull << 52;  // the small pool's segments, upwards
  std::unique_ptr<Pool> small_, large_;
  std::vector<Block*> handles_;  // handle -> block (null once freed)
  std::vector<int64_t> free_handles_;
  std::vector<std::unique_ptr<Block[]>> block_chunks_;
  std::vector<Block*> free_list_;
  std::vector<std::unique_ptr<Segment>> expandable_;
};

// ---- replaying a run ------------------------------------------------------------------------

struct WhatIfSettings {
  // Over the settings the run used (its recorded PYTORCH_CUDA_ALLOC_CONF, or inferred).
  std::optional<std::string> alloc_conf;
  // What the process may hold on the device (PyTorch's segments plus the background); unset:
  // the device's capacity less what the driver kept for itself, as measured at a recorded
  // OOM (else kDriverReserveEstimate).
  std::optional<uint64_t> limit;
  // torch.cuda.set_per_process_memory_fraction's allowed maximum; unset: the run's own.
  std::optional<uint64_t> fraction_limit;
  double scale_batch = 1.0;  // activations, temporaries and inputs scale; the rest does not
};

// What the CUDA context and the driver keep on a device beyond the allocations a process makes
// when no recorded OOM tells (the free memory then): an estimate, said in the result.
inline constexpr uint64_t kDriverReserveEstimate = 512ull << 20;

struct WhatIfOom {
  uint64_t requested_bytes = 0;  // as the program asked (the allocator's rounding not applied)
  uint64_t rounded_bytes = 0;
  uint64_t time_ns = 0;  // on the traced host's CLOCK_MONOTONIC, like the model's
  uint64_t stream = 0;
  int64_t iteration = -1;         // -1: unknown (no iterations)
  std::string module;             // the nn.Module running then, "" when unknown
  std::string phase;              // forward, backward, optimizer, evaluation, ""
  uint64_t request_index = 0;     // which of the device's requests (0-based, recorded order)
  bool recorded_request = false;  // the run's own failed request (the OOM the run had)
  AllocatorState state;           // what the request met (after the allocator's retries)
};

struct WhatIfResult {
  bool ok = false;  // false: nothing to replay (error says why)
  std::string error;
  uint32_t device = 0;
  std::string torch_version;
  std::string rules;          // which PyTorch rules were used
  std::string recorded_conf;  // the settings the run used ("" default), and how known
  std::string conf_source;    // "recorded", "inferred from the trace", "default"
  std::string conf;           // the settings replayed
  AllocatorSettings settings;
  uint64_t limit_bytes = 0;  // the device's limit used
  std::string limit_source;  // "--limit", "measured at the recorded OOM", "estimated"
  std::optional<uint64_t> fraction_limit;
  double scale_batch = 1.0;
  uint64_t requests = 0, frees = 0, requests_replayed = 0;
  uint64_t scaled_requests = 0;  // requests whose size the batch scale changed
  uint64_t reserved_peak_bytes = 0, allocated_peak_bytes = 0;
  uint64_t background_peak_bytes = 0;
  uint64_t recorded_reserved_peak_bytes = 0;  // the run's own, from its trace
  bool recorded_oom = false;
  std::optional<WhatIfOom> oom;  // the first request the model could not serve
  // The recorded run ended at its own OOM, which the replay served: what came after was never
  // recorded, so "fits" holds up to that point only.
  bool truncated_at_recorded_oom = false;
  bool window_lost = false;  // PyTorch's trace ring had dropped its start
  bool fits() const { return ok && !oom; }
};

// Replays one device of a process through the model. `tm` (may be null) gives iterations,
// modules and the categories --scale-batch needs; `background` is the process's memory
// outside PyTorch over time as (time, bytes) steps; `device_total` its capacity.
WhatIfResult replay(const TorchContext& ctx, const TorchMemory* tm, uint32_t device,
                    const std::vector<std::pair<uint64_t, uint64_t>>& background,
                    uint64_t device_total, const WhatIfSettings& settings);

// For a report's remedies: replays `device` of process `p` (of collector::analyze()) under
// `settings` and says whether it fits. `ok` false (with `error`) when the process has no
// PyTorch allocator trace for that device, or the settings are bad. Same process, same
// settings: the same result; costs one pass over the device's blocks (about 1.2 s per million
// requests); it never writes anything.
WhatIfResult replay_run(const ProcessModel& p, uint32_t device, const WhatIfSettings& settings);

// The largest batch scale that fits (bisection by replay, to 1/1000 between `lo` and `hi`):
// nullopt when even `lo` does not fit. Every other setting as in `settings`.
struct MaxBatch {
  double scale = 0;
  WhatIfResult at;  // the replay at that scale
};
std::optional<MaxBatch> max_batch_scale(const ProcessModel& p, uint32_t device,
                                        WhatIfSettings settings, double lo = 0.01,
                                        double hi = 64.0);

// A report's remedy replayed where the model can apply it (expandable_segments: the setting;
// smaller_batch: half the batch): nullopt for a remedy the allocator cannot model (bf16,
// checkpointing, no_grad change the program's requests, not the allocator's rules) or a run it
// cannot replay.
std::optional<WhatIfResult> replay_remedy(const ProcessModel& p, uint32_t device,
                                          const std::string& remedy_kind);

// The devices of `p` with PyTorch allocator requests, in order.
std::vector<uint32_t> replayable_devices(const ProcessModel& p);

}  // namespace vramtrace::collector

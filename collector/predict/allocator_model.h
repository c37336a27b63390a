// The model of PyTorch's CUDACachingAllocator that every prediction runs requests through, and
// the settings it reads (PYTORCH_CUDA_ALLOC_CONF).
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

}  // namespace vramtrace::collector

// The allocator's view of device memory: the segments a sub-allocator (PyTorch's caching
// allocator, a pool annotated through vramtrace.h) reserved, and the blocks it handed out
// inside them. The driver sees only segments; users go out of memory with gigabytes reserved
// but free, split into blocks too small for the request. This measures that, exactly:
//
//   reserved       bytes of the pool's segments (mapped pieces of growable ones)
//   in use         bytes of the blocks handed out
//   free blocks    maximal free ranges inside segments (a free block never spans two segments;
//                  mapped pieces next to each other form one range)
//   largest free   the largest of them; external fragmentation = 1 - largest / free bytes
//
// Every update costs O(log blocks); a segment's change costs O(its blocks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "collector/model/allocation.h"

namespace vramtrace::collector {

struct FragmentationState {
  uint64_t reserved = 0, in_use = 0;
  uint64_t free_blocks = 0, largest_free = 0;
  uint64_t blocks = 0, segments = 0;
  uint64_t time_ns = 0;  // when it was taken
  uint64_t free_bytes() const { return reserved > in_use ? reserved - in_use : 0; }
  // 1 - largest free block / free bytes: 0 when all free memory is one block (or none is free).
  double external() const {
    uint64_t f = free_bytes();
    return f ? 1.0 - static_cast<double>(std::min(largest_free, f)) / static_cast<double>(f) : 0.0;
  }
  void add(const FragmentationState& o) {  // sums pools of one device
    reserved += o.reserved;
    in_use += o.in_use;
    free_blocks += o.free_blocks;
    largest_free = std::max(largest_free, o.largest_free);
    blocks += o.blocks;
    segments += o.segments;
  }
};

class PoolView {
 public:
  // `joined`: a mapped piece of a growable range (joins the joined pieces next to it).
  void add_segment(uint64_t address, uint64_t bytes, bool joined);
  void remove_segment(uint64_t address, uint64_t bytes, bool joined);
  // A block handed out. A block at an address already in use replaces it (a lost free).
  void alloc_block(const Allocation& block);
  // The block at `address` goes back; nullopt when no block starts there.
  std::optional<Allocation> free_block(uint64_t address);

  FragmentationState state() const;
  const std::map<uint64_t, Allocation>& blocks() const { return blocks_; }
  // Whether [address, address + bytes) lies inside one of the pool's segments.
  bool covers(uint64_t address, uint64_t bytes) const;

 private:
  struct Range {
    uint64_t end;
    bool joined;
  };
  std::map<uint64_t, Range>::const_iterator segment_of(uint64_t address) const;
  // Adds or removes the free blocks of the segment [start, end) as the blocks are now.
  void count_gaps(uint64_t start, uint64_t end, bool add);
  void insert_range(uint64_t start, uint64_t end, bool joined);
  void erase_range(std::map<uint64_t, Range>::iterator it);
  void drop_gap(uint64_t bytes);

  std::map<uint64_t, Range> segments_;
  std::map<uint64_t, Allocation> blocks_;  // by address; Allocation::bytes is the block's size
  std::multiset<uint64_t> gaps_;           // sizes of the free blocks
  uint64_t reserved_ = 0, in_use_ = 0;
};

}  // namespace vramtrace::collector

// Segments, blocks and free blocks of one sub-allocator pool (see allocator_view.h).
#include "collector/model/allocator_view.h"

namespace vramtrace::collector {

std::map<uint64_t, PoolView::Range>::const_iterator PoolView::segment_of(uint64_t address) const {
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return segments_.end();
  --it;
  return address < it->second.end ? it : segments_.end();
}

bool PoolView::covers(uint64_t address, uint64_t bytes) const {
  auto it = segment_of(address);
  return it != segments_.end() && address + bytes <= it->second.end;
}

void PoolView::drop_gap(uint64_t bytes) {
  auto it = gaps_.find(bytes);
  if (it != gaps_.end()) gaps_.erase(it);
}

void PoolView::count_gaps(uint64_t start, uint64_t end, bool add) {
  uint64_t cursor = start;
  auto b = blocks_.lower_bound(start);
  if (b != blocks_.begin()) {
    auto prev = std::prev(b);
    cursor = std::max(cursor, std::min(end, prev->first + prev->second.bytes));
  }
  for (; b != blocks_.end() && b->first < end; ++b) {
    if (b->first > cursor)
      add ? (void)gaps_.insert(b->first - cursor) : drop_gap(b->first - cursor);
    cursor = std::max(cursor, std::min(end, b->first + b->second.bytes));
  }
  if (end > cursor) add ? (void)gaps_.insert(end - cursor) : drop_gap(end - cursor);
}

void PoolView::insert_range(uint64_t start, uint64_t end, bool joined) {
  segments_[start] = Range{end, joined};
  reserved_ += end - start;
  count_gaps(start, end, true);
}

void PoolView::erase_range(std::map<uint64_t, Range>::iterator it) {
  count_gaps(it->first, it->second.end, false);
  reserved_ -= it->second.end - it->first;
  segments_.erase(it);
}

void PoolView::add_segment(uint64_t address, uint64_t bytes, bool joined) {
  if (bytes == 0) return;
  uint64_t start = address, end = address + bytes;
  if (end < start) return;  // wraps: corrupt
  // Whatever overlaps is stale (a lost removal); a joined piece also absorbs joined neighbours
  // that touch it.
  auto it = segments_.lower_bound(start);
  if (it != segments_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > start || (joined && prev->second.joined && prev->second.end == start))
      it = prev;
  }
  while (it != segments_.end() &&
         (it->first < end || (joined && it->second.joined && it->first == end))) {
    bool overlaps = it->first < end && it->second.end > start;
    if (!overlaps && !(joined && it->second.joined)) {
      ++it;
      continue;
    }
    if (joined && it->second.joined) {
      start = std::min(start, it->first);
      end = std::max(end, it->second.end);
    }
    auto next = std::next(it);
    erase_range(it);
    it = next;
  }
  insert_range(start, end, joined);
}

void PoolView::remove_segment(uint64_t address, uint64_t bytes, bool joined) {
  if (!joined) {
    auto it = segments_.find(address);
    if (it == segments_.end()) {
      auto c = segment_of(address);
      if (c == segments_.end()) return;
      it = segments_.find(c->first);
    }
    erase_range(it);
    return;
  }
  // Unmap [address, address + bytes) out of the joined ranges it touches.
  uint64_t start = address, end = address + bytes;
  auto it = segments_.upper_bound(start);
  if (it != segments_.begin()) --it;
  while (it != segments_.end() && it->first < end) {
    if (it->second.end <= start) {
      ++it;
      continue;
    }
    uint64_t r_start = it->first, r_end = it->second.end;
    bool r_joined = it->second.joined;
    auto next = std::next(it);
    erase_range(it);
    if (r_start < start) insert_range(r_start, start, r_joined);
    if (r_end > end) insert_range(end, r_end, r_joined);
    it = next;
  }
}

void PoolView::alloc_block(const Allocation& block) {
  if (block.bytes == 0) return;
  if (blocks_.count(block.id)) free_block(block.id);
  const uint64_t a = block.id, e = block.id + block.bytes;
  auto seg = segment_of(a);
  auto next = blocks_.lower_bound(a);
  bool simple = seg != segments_.end() && e <= seg->second.end;
  uint64_t g0 = 0, g1 = 0;
  if (simple) {
    g0 = seg->first;
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      g0 = std::max(g0, prev->first + prev->second.bytes);
    }
    g1 = seg->second.end;
    if (next != blocks_.end()) g1 = std::min(g1, next->first);
    simple = g0 <= a && e <= g1;  // fits inside one free block
  }
  if (simple) {
    drop_gap(g1 - g0);
    if (a > g0) gaps_.insert(a - g0);
    if (g1 > e) gaps_.insert(g1 - e);
    blocks_.emplace(a, block);
  } else if (seg != segments_.end()) {
    // Overlaps another block or runs past its segment (inconsistent input): recount the
    // segment's free blocks around it.
    uint64_t s0 = seg->first, s1 = seg->second.end;
    count_gaps(s0, s1, false);
    blocks_.emplace(a, block);
    count_gaps(s0, s1, true);
  } else {
    blocks_.emplace(a, block);  // outside every known segment: in use, no free blocks change
  }
  in_use_ += block.bytes;
}

std::optional<Allocation> PoolView::free_block(uint64_t address) {
  auto it = blocks_.find(address);
  if (it == blocks_.end()) return std::nullopt;
  Allocation block = it->second;
  const uint64_t a = block.id, e = block.id + block.bytes;
  auto seg = segment_of(a);
  if (seg != segments_.end() && e <= seg->second.end) {
    uint64_t g0 = seg->first, g1 = seg->second.end;
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      g0 = std::max(g0, prev->first + prev->second.bytes);
    }
    auto next = std::next(it);
    if (next != blocks_.end()) g1 = std::min(g1, next->first);
    if (g0 <= a && e <= g1) {
      if (a > g0) drop_gap(a - g0);
      if (g1 > e) drop_gap(g1 - e);
      gaps_.insert(g1 - g0);
      blocks_.erase(it);
    } else {
      uint64_t s0 = seg->first, s1 = seg->second.end;
      count_gaps(s0, s1, false);
      blocks_.erase(it);
      count_gaps(s0, s1, true);
    }
  } else {
    blocks_.erase(it);
  }
  in_use_ -= std::min(in_use_, block.bytes);
  return block;
}

FragmentationState PoolView::state() const {
  FragmentationState s;
  s.reserved = reserved_;
  s.in_use = in_use_;
  s.free_blocks = gaps_.size();
  s.largest_free = gaps_.empty() ? 0 : *gaps_.rbegin();
  s.blocks = blocks_.size();
  s.segments = segments_.size();
  return s;
}

}  // namespace vramtrace::collector

// The builder's view of sub-allocators (PyTorch's caching allocator, pools a program declares):
// their pools, segments and blocks, the state of their memory over time, and the OOMs they
// report (see builder.h).
#include "collector/model/builder.h"

namespace vramtrace::collector {

using format::Api;
using format::Record;
using format::RecordType;
namespace rec = format::rec;

void Builder::on_user_pool(const rec::UserPool& r) {
  UserPool& pool = p_->user_pools[r.pool];
  pool.device = r.device;
  pool.torch = r.pool >= kTorchPoolBase;
  pool.name = pool.torch ? std::string(kTorchPoolName) : p_->kernel_name(r.name_id);
  if (pool.name.empty()) pool.name = "pool " + std::to_string(r.pool);
  device(r.device).has_allocator_view = true;
}

void Builder::on_user_segment(const rec::UserSegment& r, uint64_t t) {
  UserPool* pool = user_pool(r.pool);
  if (!pool) return;
  const format::SegmentOp op = r.op;
  bool joined = op == format::SegmentOp::Map || op == format::SegmentOp::Unmap;
  if (op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map)
    pool->view.add_segment(r.address, r.bytes, joined);
  else
    pool->view.remove_segment(r.address, r.bytes, joined);
  pool->peak_reserved = std::max(pool->peak_reserved, pool->view.state().reserved);
  on_allocator_change(pool->device, t,
                      op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map);
}

void Builder::on_user_block(const rec::UserBlock& r, uint64_t t, uint64_t stream) {
  UserPool* pool = user_pool(r.pool);
  if (!pool) {
    pend_->stack = pend_->py = 0;
    return;
  }
  if (r.bytes) {
    if (pool->view.blocks().size() >= kMaxLive) [[unlikely]]
      return stop_at_live_limit("blocks of one pool", t);
    Allocation b = make(Api::Unknown, pool->device, r.address, r.bytes, t, stream, r.thread);
    b.space = 1;  // a block
    pool->view.alloc_block(b);
    pool->peak_in_use = std::max(pool->peak_in_use, pool->view.state().in_use);
    device(pool->device).blocks.add(b, t);
  } else if (auto freed = pool->view.free_block(r.address)) {
    device(pool->device).blocks.remove(*freed, t);
  }
  on_allocator_change(pool->device, t, r.bytes != 0);
}

UserPool* Builder::user_pool(uint64_t id) {
  auto it = p_->user_pools.find(id);
  return it == p_->user_pools.end() ? nullptr : &it->second;
}

FragmentationState Builder::allocator_state(uint32_t device_index, uint64_t now) const {
  FragmentationState sum;
  for (auto& [id, pool] : p_->user_pools)
    if (pool.device == device_index) sum.add(pool.view.state());
  sum.time_ns = now;
  return sum;
}

// A pool of `device_index` changed: the device's sums, their timelines, the state at the
// in-use peak while it settles, and the moments of most in use and most free.
void Builder::on_allocator_change(uint32_t device_index, uint64_t now, bool grew) {
  DeviceModel& d = device(device_index);
  d.has_allocator_view = true;
  d.frag = allocator_state(device_index, now);
  d.frag_free_timeline.add(now, d.frag.free_bytes());
  d.frag_largest_timeline.add(now, d.frag.largest_free);
  if (grew && d.frag_at_peak && now <= frag_peak_until_[device_index]) d.frag_at_peak = d.frag;
  if (d.frag.in_use > d.allocator_peak_in_use) {
    d.allocator_peak_in_use = d.frag.in_use;
    d.allocator_peak_time = now;
  }
  if (d.frag.free_bytes() > d.frag_most_free.free_bytes()) d.frag_most_free = d.frag;
}

// Everything of a device live now: driver allocations (not the segments a pool carves
// blocks from: those are the pool's) and the pools' blocks.
std::vector<Allocation> Builder::survivors(uint32_t device_index) const {
  std::vector<Allocation> out;
  for (auto& [k, a] : p_->live)
    if (a.device == device_index && !held_by_pool(a)) out.push_back(a);
  for (auto& [k, h] : p_->vmm_handles)
    if (h.alloc.device == device_index && !held_by_pool(h.alloc)) out.push_back(h.alloc);
  for (auto& [id, pool] : p_->user_pools)
    if (pool.device == device_index)
      for (auto& [addr, b] : pool.view.blocks()) out.push_back(b);
  return out;
}

// The pool could not serve a request. PyTorch reports its OOM after the driver's failed
// cuMemAlloc (and its retry after freeing cached blocks): that OOM gets the pool's view;
// otherwise (a pool that never asked the driver) it is an OOM of its own.
void Builder::on_allocator_oom(const rec::UserOom& r, uint64_t t) {
  const uint32_t stack = pend_->stack, py_stack = pend_->py;
  pend_->stack = pend_->py = 0;
  UserPool* pool = user_pool(r.pool);
  if (!pool) return;
  ++pool->ooms;
  constexpr uint64_t kSameEpisodeNs = 2000000000;
  OomEvent* o = nullptr;
  auto same_episode = [&](const OomEvent& x) {
    return x.device == pool->device && !x.allocator && t - std::min(t, x.time_ns) <= kSameEpisodeNs;
  };
  if (!p_->ooms.empty() && same_episode(p_->ooms.back())) {
    // The driver's failures of this episode (PyTorch's first try and its retry after
    // freeing cached blocks) are one OOM: the last, which keeps the count.
    size_t first = p_->ooms.size() - 1;
    while (first > 0 && same_episode(p_->ooms[first - 1])) --first;
    uint64_t attempts = 0;
    for (size_t i = first; i < p_->ooms.size(); ++i) attempts += p_->ooms[i].driver_attempts;
    p_->ooms.erase(p_->ooms.begin() + static_cast<std::ptrdiff_t>(first), p_->ooms.end() - 1);
    o = &p_->ooms.back();
    o->driver_attempts = attempts;
  }
  if (!o) {
    p_->ooms.emplace_back();
    o = &p_->ooms.back();
    o->driver_attempts = 0;
    o->device = pool->device;
    o->pid = p_->pid;
    o->requested_bytes = r.bytes;
    o->time_ns = t;
    o->thread = r.thread;
    o->live_bytes = device(pool->device).memory.live_bytes();
    o->last_kernel = p_->kernel_name(device(pool->device).last_kernel);
    o->stack = stack;
    if (r.free_plus_one) o->free_bytes = r.free_plus_one - 1;
    fill_live_set(*o);
  }
  if (py_stack && !o->py_stack) o->py_stack = py_stack;
  if (stack && !o->stack) o->stack = stack;
  o->allocator = true;
  o->pool = pool->name;
  o->allocator_request = r.bytes;
  o->fragmentation = allocator_state(pool->device, t);
  if (p_->ooms.size() <= kOomsWithSurvivors) o->survivors = survivors(pool->device);
}

}  // namespace vramtrace::collector

// The PyTorch memory snapshot of report/memory_viz.h. Both kinds of process give the same list
// of actions per device, in order; one sweep over it then gives each action's stream (a segment
// takes the stream of the first block made in it) and the state at the end (segments and the
// blocks live in them), so that the segments and the trace always agree: memory_viz replays the
// trace backwards from the segments, and a block outside every segment breaks its drawing.
#include "report/memory_viz.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collector/analysis/stacks.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/torch_memory.h"
#include "common/format.h"

namespace vramtrace::report {
namespace {

using collector::ProcessModel;
using pickle::Value;

// PyTorch's small pool: segments of 2 MiB for blocks up to 1 MiB (CUDACachingAllocator.cpp).
constexpr uint64_t kSmallSegment = 2ull << 20;
// PyTorch rounds every block up to 512 bytes.
constexpr uint64_t kBlockRound = 512;

enum class Action { Alloc, FreeRequested, FreeCompleted, SegAlloc, SegFree, SegMap, SegUnmap, Oom };
const char* action_name(Action a) {
  switch (a) {
    case Action::Alloc: return "alloc";
    case Action::FreeRequested: return "free_requested";
    case Action::FreeCompleted: return "free_completed";
    case Action::SegAlloc: return "segment_alloc";
    case Action::SegFree: return "segment_free";
    case Action::SegMap: return "segment_map";
    case Action::SegUnmap: return "segment_unmap";
    case Action::Oom: return "oom";
  }
  return "?";
}

struct Entry {
  Action action = Action::Alloc;
  uint32_t device = 0;
  uint64_t time_ns = 0;
  uint64_t addr = 0, size = 0, stream = 0;
  int64_t frames = -1;       // index into Actions::frames; -1: none
  uint64_t device_free = 0;  // an OOM's
  // Order among actions at the same moment (PyTorch's trace keeps microseconds): see torch_actions.
  int64_t k1 = 0;
  int k2 = 0;
  size_t seq = 0;
};

struct Actions {
  std::vector<Entry> entries;
  std::vector<Value> frames;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> pool_ids;  // segment address -> pool id
};

Value frame(const std::string& file, uint64_t line, const std::string& name) {
  Value f = Value::dict();
  f.set("filename", Value::str(file));
  f.set("line", Value::uinteger(line));
  f.set("name", Value::str(name));
  return f;
}

struct Clock {
  uint64_t origin = 0;
  int64_t us(uint64_t ns) const {
    return ns <= origin ? 0 : static_cast<int64_t>((ns - origin) / 1000);
  }
};

// ---- PyTorch's allocator ------------------------------------------------------------------------

// What vramtrace knows of a block, as frames (innermost first, as PyTorch lists them): its
// category, phase and iteration; the module that made it; the user's line.
Value block_frames(const collector::TorchMemory& tm, const collector::BlockInfo& b) {
  const collector::TorchContext& ctx = tm.context();
  Value frames = Value::list();
  std::string what = collector::category_key(b.category);
  if (b.phase != collector::TorchPhase::None)
    what += ", " + std::string(collector::phase_key(b.phase));
  if (b.iteration >= 0) what += ", iteration " + std::to_string(b.iteration);
  frames.push(frame("<vramtrace category>", 0, what));
  if (b.module && b.module <= ctx.modules.size()) {
    const collector::TorchModule& m = ctx.modules[b.module - 1];
    std::string name = tm.module_name(b.module);
    if (!m.type.empty()) name = name.empty() ? m.type : name + " (" + m.type + ")";
    frames.push(frame(m.file, m.line, name));
  }
  if (b.site && b.site <= ctx.sites.size()) {
    const collector::TorchSite& s = ctx.sites[b.site - 1];
    frames.push(frame(s.file, s.line, s.function));
  }
  return frames;
}

// The allocator's trace as actions. At one moment: segments made come first, then the blocks in
// allocation order (a block's free before the making of any later block, which may take its
// address; its free after its own making), then segments released, then OOMs (the allocator
// releases its cache before it gives up).
Actions torch_actions(const ProcessModel& p) {
  const collector::TorchContext& ctx = *p.torch_context;
  const collector::TorchMemory* tm = p.torch_memory.get();
  Actions out;
  for (const auto& s : ctx.pool_segments) out.pool_ids[s.address] = {s.pool_id[0], s.pool_id[1]};
  size_t seq = 0;
  for (size_t j = 0; j < ctx.reserves.size(); ++j) {
    const auto& r = ctx.reserves[j];
    if (r.delta == 0) continue;
    Entry e;
    const bool grew = r.delta > 0;
    e.action = r.map ? (grew ? Action::SegMap : Action::SegUnmap)
                     : (grew ? Action::SegAlloc : Action::SegFree);
    e.device = r.device;
    e.time_ns = r.time_ns;
    e.addr = r.address;
    e.size = grew ? static_cast<uint64_t>(r.delta) : uint64_t{0} - static_cast<uint64_t>(r.delta);
    e.k1 = grew ? INT64_MIN : INT64_MAX;
    e.seq = seq++;
    out.entries.push_back(e);
  }
  for (size_t i = 0; i < ctx.blocks.size(); ++i) {
    const auto& b = ctx.blocks[i];
    int64_t frames = -1;
    if (tm && i < tm->info().size()) {
      out.frames.push_back(block_frames(*tm, tm->info()[i]));
      frames = static_cast<int64_t>(out.frames.size() - 1);
    }
    Entry e;
    e.device = b.device;
    e.addr = b.address;
    e.size = b.bytes;
    e.stream = b.stream;
    e.frames = frames;
    e.k1 = static_cast<int64_t>(i);
    if (!b.before_window) {
      e.action = Action::Alloc;
      e.time_ns = b.alloc_ns;
      e.k2 = 0;
      e.seq = seq++;
      out.entries.push_back(e);
    }
    if (b.free_ns != UINT64_MAX) {
      e.time_ns = b.free_ns;
      e.action = Action::FreeRequested;
      e.k2 = 1;
      e.seq = seq++;
      out.entries.push_back(e);
      e.action = Action::FreeCompleted;
      e.k2 = 2;
      e.seq = seq++;
      out.entries.push_back(e);
    }
  }
  for (const auto& o : ctx.oom_requests) {
    Entry e;
    e.action = Action::Oom;
    e.device = o.device;
    e.time_ns = o.time_ns;
    e.size = o.bytes;
    e.stream = o.stream;
    e.device_free = o.device_free == UINT64_MAX ? 0 : o.device_free;
    e.k1 = INT64_MAX;
    e.k2 = 1;
    e.seq = seq++;
    out.entries.push_back(e);
  }
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
    if (a.k1 != b.k1) return a.k1 < b.k1;
    if (a.k2 != b.k2) return a.k2 < b.k2;
    return a.seq < b.seq;
  });
  return out;
}

// ---- a native program's driver allocations ------------------------------------------------------

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Value stack_frames(collector::StackResolver* stacks, uint32_t native, uint32_t py) {
  Value frames = Value::list();
  if (!stacks || (!native && !py)) return frames;
  for (const collector::Frame& f : stacks->attribute(native, py).frames) {
    if (f.internal) continue;
    const std::string file = f.file.empty() ? f.module : f.file;
    std::string name = f.function;
    if (name.empty()) {
      const size_t slash = f.module.find_last_of('/');
      name = (slash == std::string::npos ? f.module : f.module.substr(slash + 1)) + "+" +
             hex(f.offset);
    }
    frames.push(frame(file, f.line, name));
  }
  return frames;
}

bool device_memory(format::Api api) {
  const format::MemoryKind k = format::memory_kind(api);
  return k == format::MemoryKind::Device || k == format::MemoryKind::Managed;
}

// Each driver allocation a segment with one block, each free the block's and the segment's end,
// each failed allocation an OOM: the trace read again in its order.
Actions driver_actions(const ProcessModel& p, collector::StackResolver* stacks) {
  Actions out;
  collector::TraceReader reader(p.trace_path);
  format::Record r;
  uint32_t native = 0, py = 0;
  struct Live {
    uint32_t device;
    uint64_t bytes, stream;
    int64_t frames;
  };
  std::map<uint64_t, Live> live;
  size_t seq = 0;
  auto add = [&](Action a, uint32_t device, uint64_t t, uint64_t addr, uint64_t size,
                 uint64_t stream, int64_t frames) {
    Entry e;
    e.action = a;
    e.device = device;
    e.time_ns = t;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    e.frames = frames;
    e.seq = seq++;
    out.entries.push_back(e);
  };
  auto release = [&](std::map<uint64_t, Live>::iterator it, uint64_t t) {
    const Live& l = it->second;
    add(Action::FreeRequested, l.device, t, it->first, l.bytes, l.stream, l.frames);
    add(Action::FreeCompleted, l.device, t, it->first, l.bytes, l.stream, l.frames);
    add(Action::SegFree, l.device, t, it->first, l.bytes, l.stream, l.frames);
    live.erase(it);
  };
  while (reader.next(r)) {
    const uint64_t t = r.time_ns;
    if (r.type == format::RecordType::AllocStack) {
      native = r.alloc_stack.native_leaf;
      py = r.alloc_stack.py_leaf;
      continue;
    }
    if (r.type == format::RecordType::PyStackNode) continue;
    const uint32_t stack = native, py_stack = py;
    native = py = 0;
    if (r.type == format::RecordType::Alloc && device_memory(r.alloc.api)) {
      const auto& a = r.alloc;
      if (auto it = live.find(a.address); it != live.end()) release(it, t);  // a free not seen
      out.frames.push_back(stack_frames(stacks, stack, py_stack));
      const auto frames = static_cast<int64_t>(out.frames.size() - 1);
      live[a.address] = {a.device, a.bytes, a.stream, frames};
      add(Action::SegAlloc, a.device, t, a.address, a.bytes, a.stream, frames);
      add(Action::Alloc, a.device, t, a.address, a.bytes, a.stream, frames);
    } else if (r.type == format::RecordType::Free && device_memory(r.free.api)) {
      if (auto it = live.find(r.free.address); it != live.end()) release(it, t);
    } else if (r.type == format::RecordType::AllocFailed && device_memory(r.alloc_failed.api)) {
      Entry e;
      e.action = Action::Oom;
      e.device = r.alloc_failed.device;
      e.time_ns = t;
      e.size = r.alloc_failed.bytes;
      for (const auto& o : p.ooms)
        if (o.time_ns == t && o.device == e.device && o.free_bytes) e.device_free = *o.free_bytes;
      out.frames.push_back(stack_frames(stacks, stack, py_stack));
      e.frames = static_cast<int64_t>(out.frames.size() - 1);
      e.seq = seq++;
      out.entries.push_back(e);
    }
  }
  return out;
}

// ---- the sweep: streams, the state at the end, the pickle
// -----------------------------------------

struct Range {
  uint64_t size = 0, stream = 0;
  bool stream_known = false, expandable = false;
  std::vector<size_t> made_by;  // entries that made it (their stream is the segment's)
};
struct LiveBlock {
  uint64_t size = 0, stream = 0;
  int64_t frames = -1;
};

// The range of `ranges` holding `addr`, or end().
template <typename M>
typename M::iterator holding(M& ranges, uint64_t addr) {
  auto it = ranges.upper_bound(addr);
  if (it == ranges.begin()) return ranges.end();
  --it;
  return addr < it->first + it->second.size ? it : ranges.end();
}

Value entry_value(const Entry& e, const Actions& a, const Clock& clock) {
  Value v = Value::dict();
  v.set("action", Value::str(action_name(e.action)));
  v.set("addr", Value::uinteger(e.addr));
  v.set("size", Value::uinteger(e.size));
  v.set("stream", Value::uinteger(e.stream));
  v.set("time_us", Value::integer(clock.us(e.time_ns)));
  v.set("frames", e.frames >= 0 ? a.frames[static_cast<size_t>(e.frames)] : Value::list());
  if (e.action == Action::Oom) v.set("device_free", Value::uinteger(e.device_free));
  return v;
}

Value block_value(uint64_t addr, uint64_t size, uint64_t requested, bool active, Value frames) {
  Value b = Value::dict();
  b.set("address", Value::uinteger(addr));
  b.set("size", Value::uinteger(size));
  b.set("requested_size", Value::uinteger(requested));
  b.set("state", Value::str(active ? "active_allocated" : "inactive"));
  b.set("frames", std::move(frames));
  return b;
}

}  // namespace

MemoryViz memory_viz(const collector::RunAnalysis& a, size_t process) {
  const ProcessModel& p = *a.processes.at(process).model;
  const Clock clock{a.cuda_start_ns ? a.cuda_start_ns : a.run->origin_ns};
  MemoryViz out;
  out.pytorch =
      p.torch_context && (!p.torch_context->blocks.empty() || !p.torch_context->reserves.empty());
  collector::StackResolver* stacks = process < a.stacks.size() ? a.stacks[process].get() : nullptr;
  Actions acts = out.pytorch ? torch_actions(p) : driver_actions(p, stacks);

  uint32_t devices = 0;
  for (const auto& e : acts.entries) devices = std::max(devices, e.device + 1);
  for (const auto& [index, d] : p.devices) devices = std::max(devices, index + 1);
  std::vector<std::map<uint64_t, Range>> segs(devices);
  std::vector<std::map<uint64_t, LiveBlock>> blocks(devices);
  std::vector<Entry> kept;
  kept.reserve(acts.entries.size());
  for (Entry e : acts.entries) {
    auto& ranges = segs[e.device];
    auto& live = blocks[e.device];
    switch (e.action) {
      case Action::SegAlloc:
      case Action::SegMap: {
        Range& r = ranges[e.addr];
        r = Range{e.size, e.stream, !out.pytorch, e.action == Action::SegMap, {kept.size()}};
        break;
      }
      case Action::SegFree:
      case Action::SegUnmap: {
        auto it = holding(ranges, e.addr);
        if (it == ranges.end()) break;
        e.stream = it->second.stream;
        const uint64_t start = it->first, end = start + it->second.size;
        Range rest = it->second;
        ranges.erase(it);
        // An unmap of part of a range leaves what lies either side of it mapped.
        if (e.addr > start) {
          Range left = rest;
          left.size = e.addr - start;
          ranges[start] = left;
        }
        if (e.addr + e.size < end) {
          Range right = rest;
          right.size = end - (e.addr + e.size);
          ranges[e.addr + e.size] = right;
        }
        break;
      }
      case Action::Alloc: {
        auto it = holding(ranges, e.addr);
        if (it == ranges.end()) {
          // Made in a segment the trace does not show made (before the earliest entry PyTorch's
          // ring kept): a segment of the block's own size, made just before it.
          Entry s = e;
          s.action = Action::SegAlloc;
          s.size = std::max(e.size, (e.size + kBlockRound - 1) / kBlockRound * kBlockRound);
          s.frames = -1;
          ranges[e.addr] = Range{s.size, e.stream, true, false, {kept.size()}};
          kept.push_back(s);
          it = ranges.find(e.addr);
        }
        Range& r = it->second;
        if (!r.stream_known) {
          r.stream_known = true;
          r.stream = e.stream;
          for (size_t k : r.made_by) kept[k].stream = e.stream;
        }
        live[e.addr] = LiveBlock{e.size, e.stream, e.frames};
        break;
      }
      case Action::FreeRequested:
      case Action::FreeCompleted:
        // A block freed that the trace never showed made, outside every segment then: memory_viz
        // would have nowhere to draw it.
        if (holding(ranges, e.addr) == ranges.end() && !live.count(e.addr)) continue;
        if (e.action == Action::FreeCompleted) live.erase(e.addr);
        break;
      case Action::Oom: break;
    }
    kept.push_back(e);
  }

  std::vector<Value> per_device(devices, Value::list());
  for (const auto& e : kept) per_device[e.device].push(entry_value(e, acts, clock));
  Value traces = Value::list(std::move(per_device));
  out.events = kept.size();

  Value segments = Value::list();
  for (uint32_t d = 0; d < devices; ++d) {
    // The mapped ranges of an expandable segment that touch are one segment, as PyTorch lists it.
    std::vector<std::pair<uint64_t, Range>> merged;
    for (const auto& [addr, r] : segs[d]) {
      if (!merged.empty() && r.expandable && merged.back().second.expandable &&
          merged.back().first + merged.back().second.size == addr &&
          merged.back().second.stream == r.stream) {
        merged.back().second.size += r.size;
        continue;
      }
      merged.emplace_back(addr, r);
    }
    const auto& live = blocks[d];
    for (const auto& [addr, r] : merged) {
      const uint64_t end = addr + r.size;
      Value list = Value::list();
      uint64_t cursor = addr, allocated = 0, requested = 0;
      for (auto it = live.lower_bound(addr); it != live.end() && it->first < end; ++it) {
        if (it->first < cursor || it->second.size == 0) continue;  // overlapping: a damaged trace
        if (it->first > cursor)
          list.push(block_value(cursor, it->first - cursor, 0, false, Value::list()));
        const auto next = std::next(it);
        const uint64_t limit = next != live.end() && next->first < end ? next->first : end;
        // The block's own size: its request rounded as PyTorch rounds it (a driver allocation
        // is its own segment, exactly), never past the next block or the segment's end.
        const uint64_t own =
            std::min(limit - it->first,
                     out.pytorch ? (it->second.size + kBlockRound - 1) / kBlockRound * kBlockRound
                                 : it->second.size);
        const uint64_t asked = std::min(it->second.size, own);
        list.push(block_value(it->first, own, asked, true,
                              it->second.frames >= 0
                                  ? acts.frames[static_cast<size_t>(it->second.frames)]
                                  : Value::list()));
        allocated += own;
        requested += asked;
        cursor = it->first + own;
      }
      if (cursor < end) list.push(block_value(cursor, end - cursor, 0, false, Value::list()));
      Value s = Value::dict();
      s.set("device", Value::uinteger(d));
      s.set("address", Value::uinteger(addr));
      s.set("total_size", Value::uinteger(r.size));
      s.set("allocated_size", Value::uinteger(allocated));
      s.set("active_size", Value::uinteger(allocated));
      s.set("requested_size", Value::uinteger(requested));
      s.set("stream", Value::uinteger(r.stream));
      s.set(
          "segment_type",
          Value::str(out.pytorch && !r.expandable && r.size <= kSmallSegment ? "small" : "large"));
      const auto pool = acts.pool_ids.find(addr);
      const auto id =
          pool == acts.pool_ids.end() ? std::make_pair(uint64_t{0}, uint64_t{0}) : pool->second;
      s.set("segment_pool_id",
            Value::tuple({Value::uinteger(id.first), Value::uinteger(id.second)}));
      s.set("is_expandable", Value::boolean(r.expandable));
      s.set("frames", Value::list());
      s.set("blocks", std::move(list));
      segments.push(std::move(s));
      ++out.segments;
    }
  }
  out.snapshot = Value::dict();
  out.snapshot.set("segments", std::move(segments));
  out.snapshot.set("device_traces", std::move(traces));
  return out;
}

}  // namespace vramtrace::report

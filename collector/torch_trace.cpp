// Reading PyTorch's allocator trace files (see torch_trace.h). Never trusts the input: every
// field is parsed with bounds, a bad line stops the reading there and says which.
#include "collector/torch_trace.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

namespace vramtrace::collector {
namespace {

using format::RecordType;

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return out;
}

bool to_u64(const std::string& s, uint64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

struct Frame {
  uint32_t code = 0, line = 0;
};

}  // namespace

TorchTrace read_torch_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open");
  TorchTrace t;
  std::string line;
  constexpr size_t kMaxLine = 1 << 16;
  if (!std::getline(in, line) || line.rfind("vramtrace.torch/", 0) != 0)
    throw TraceError(path + ": not a PyTorch allocator trace (no vramtrace.torch header)");
  auto head = split_tabs(line);
  uint64_t realtime = 0, mono = 0;
  const bool v2 = head[0] == "vramtrace.torch/2";
  t.context.present = v2;
  if (head[0] != "vramtrace.torch/1" && !v2)
    throw TraceError(path + ": PyTorch allocator trace of an unknown version (" + head[0] + ")");
  if (head.size() < 5 || !to_u64(head[1], &t.pid) || !to_u64(head[2], &realtime) ||
      !to_u64(head[3], &mono))
    throw TraceError(path + ": bad header line");
  t.torch_version = head[4].substr(0, 64);
  t.context.torch_version = t.torch_version;
  // Epoch - monotonic, ns; times are moved by it in unsigned arithmetic (modulo 2^64: the
  // same result, and a damaged file's huge times wrap instead of overflowing).
  const uint64_t offset = realtime - mono;

  std::unordered_map<uint64_t, Frame> frames;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> nodes;  // (parent, code, line)
  uint32_t next_id = kTorchNodeBase;
  std::map<uint32_t, bool> pools;  // device -> pool record sent
  std::vector<TorchEvent> events;
  TorchContext& ctx = t.context;
  std::map<std::pair<uint32_t, uint64_t>, size_t> live_blocks;  // (device, address) -> index
  // A ring that dropped its earliest entries: what was live when its window began is what the
  // window frees without having made, and what the dump's allocator state holds that the
  // window did not make (device, address, bytes; the free's time, or UINT64_MAX).
  struct BeforeWindow {
    uint32_t device = 0;
    uint64_t address = 0, bytes = 0, free_ns = UINT64_MAX;
  };
  std::set<uint32_t> wrapped;
  std::map<uint32_t, uint64_t> first_time;  // device -> its first entry's time
  std::vector<BeforeWindow> blocks_before, segments_before;
  std::set<std::pair<uint32_t, uint64_t>> live_segments;  // made in the window, not yet freed
  std::vector<BeforeWindow> dump_blocks, dump_segments;   // A and G lines
  std::map<uint32_t, uint64_t> last_time;                 // device -> its last entry's time
  auto to_mono = [&](uint64_t realtime_ns) { return realtime_ns - offset; };
  constexpr size_t kMaxNames = 1 << 20;  // modules, sites: a corrupt file cannot make millions
  bool complete = false;
  uint64_t lineno = 1, entries = 0;
  auto fail = [&](const std::string& why) {
    t.problem = "line " + std::to_string(lineno) + ": " + why;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.size() > kMaxLine) {
      fail("line too long");
      break;
    }
    auto f = split_tabs(line);
    if (f[0] == "F") {
      uint64_t id = 0, ln = 0;
      if (f.size() < 5 || !to_u64(f[1], &id) || !to_u64(f[3], &ln)) {
        fail("bad frame");
        break;
      }
      Frame fr{next_id++, static_cast<uint32_t>(std::min<uint64_t>(ln, UINT32_MAX))};
      frames[id] = fr;
      TorchEvent code;
      code.record.type = RecordType::PyCode;
      const std::string& file = t.text.emplace_back(f[2].substr(0, 4096));
      const std::string& function = t.text.emplace_back(f[4].substr(0, 4096));
      code.record.py_code = {fr.code, file, function};
      events.push_back(code);
    } else if (f[0] == "E") {
      uint64_t device = 0, addr = 0, bytes = 0, stream = 0, time_us = 0;
      if (f.size() < 9 || !to_u64(f[1], &device) || device >= 4096 || !to_u64(f[3], &addr) ||
          !to_u64(f[4], &bytes) || !to_u64(f[5], &stream) || !to_u64(f[6], &time_us)) {
        fail("bad event");
        break;
      }
      ++entries;
      const std::string& action = f[2];
      TorchEvent e;
      format::Record& r = e.record;
      const auto dev = static_cast<uint32_t>(device);
      const uint64_t pool = kTorchPoolBase + device;
      r.time_ns = time_us * 1000 - offset;
      if (action == "segment_alloc" || action == "segment_free" || action == "segment_map" ||
          action == "segment_unmap") {
        r.type = RecordType::UserSegment;
        format::SegmentOp op = action == "segment_alloc"  ? format::SegmentOp::AddSegment
                               : action == "segment_free" ? format::SegmentOp::RemoveSegment
                               : action == "segment_map"  ? format::SegmentOp::Map
                                                          : format::SegmentOp::Unmap;
        r.user_segment = {pool, addr, bytes, op};
      } else if (action == "alloc" || action == "free_completed") {
        r.type = RecordType::UserBlock;
        r.user_block = {pool, addr, action == "free_completed" ? 0 : bytes, 0};
        e.stream = stream;
      } else if (action == "oom") {
        r.type = RecordType::UserOom;
        uint64_t free_b = 0;
        r.user_oom = {pool, bytes, 0, to_u64(f[8], &free_b) ? free_b + 1 : 0};
      } else {
        continue;  // free_requested, snapshot, ...: nothing changes hands
      }
      // One device's entries are in the order they happened, with microsecond times: entries
      // of one microsecond keep that order (a block freed just after another was made was
      // live when it was made).
      uint64_t& last = last_time[dev];
      if (r.time_ns <= last) r.time_ns = last + 1;
      last = r.time_ns;
      first_time.try_emplace(dev, r.time_ns);
      if (r.type == RecordType::UserBlock) {
        const std::pair<uint32_t, uint64_t> key{dev, addr};
        if (r.user_block.bytes) {
          live_blocks[key] = ctx.blocks.size();
          ctx.blocks.push_back({dev, addr, bytes, r.time_ns, UINT64_MAX, stream});
        } else if (auto it = live_blocks.find(key); it != live_blocks.end()) {
          ctx.blocks[it->second].free_ns = r.time_ns;
          live_blocks.erase(it);
        } else if (wrapped.count(dev)) {
          blocks_before.push_back({dev, addr, bytes, r.time_ns});
        }
      } else if (r.type == RecordType::UserSegment) {
        const auto op = r.user_segment.op;
        const bool grow = op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map;
        if (grow)
          live_segments.insert({dev, addr});
        else if (!live_segments.erase({dev, addr}) && wrapped.count(dev))
          segments_before.push_back({dev, addr, bytes, r.time_ns});
        ctx.reserves.push_back({dev, addr, r.time_ns,
                                grow ? static_cast<int64_t>(bytes) : -static_cast<int64_t>(bytes),
                                op == format::SegmentOp::Map || op == format::SegmentOp::Unmap});
      } else if (r.type == RecordType::UserOom) {
        ctx.ooms.push_back(r.time_ns);
        uint64_t device_free = UINT64_MAX;
        if (!to_u64(f[8], &device_free)) device_free = UINT64_MAX;
        ctx.oom_requests.push_back({dev, r.time_ns, bytes, stream, device_free});
      }
      if (!pools[dev]) {
        pools[dev] = true;
        TorchEvent p;
        p.record.type = RecordType::UserPool;
        p.record.user_pool = {pool, dev, 0};  // named kTorchPoolName by its id
        events.push_back(p);
      }
      // The frames become a Python stack (outermost first in the tree), named just before
      // the block or OOM it belongs to.
      if ((r.type == RecordType::UserBlock && r.user_block.bytes) ||
          r.type == RecordType::UserOom) {
        std::vector<uint32_t> ids;
        size_t start = 0;
        const std::string& list = f[7];
        while (start < list.size() && ids.size() < 256) {
          size_t comma = list.find(',', start);
          uint64_t id = 0;
          if (to_u64(list.substr(start,
                                 comma == std::string::npos ? std::string::npos : comma - start),
                     &id)) {
            auto fr = frames.find(id);
            if (fr != frames.end()) ids.push_back(static_cast<uint32_t>(id));
          }
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        uint32_t parent = 0;
        for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
          const Frame& fr = frames[*it];
          auto [n, added] = nodes.try_emplace({parent, fr.code, fr.line}, 0);
          if (added) {
            n->second = next_id++;
            TorchEvent node;
            node.record.type = RecordType::PyStackNode;
            node.record.py_stack_node = {n->second, parent, fr.code, fr.line};
            node.record.time_ns = r.time_ns;
            events.push_back(node);
          }
          parent = n->second;
        }
        if (parent) {
          TorchEvent stack;
          stack.record.type = RecordType::AllocStack;
          stack.record.alloc_stack = {0, parent};
          stack.record.time_ns = r.time_ns;
          events.push_back(stack);
        }
      }
      events.push_back(e);
    } else if (f[0] == "W") {
      uint64_t device = 0, n = 0;
      if (f.size() >= 3 && to_u64(f[1], &device) && to_u64(f[2], &n) && device < 4096) {
        wrapped.insert(static_cast<uint32_t>(device));
        t.problem = "PyTorch's trace buffer of device " + std::to_string(device) + " was full (" +
                    std::to_string(n) + " entries): its earliest events are missing";
      }
    } else if (v2 && (f[0] == "A" || f[0] == "G") && f.size() >= 4) {
      uint64_t device = 0, addr = 0, bytes = 0;
      if (!to_u64(f[1], &device) || device >= 4096 || !to_u64(f[2], &addr) ||
          !to_u64(f[3], &bytes)) {
        fail("bad allocator state");
        break;
      }
      (f[0] == "A" ? dump_blocks : dump_segments)
          .push_back({static_cast<uint32_t>(device), addr, bytes});
    } else if (v2 && f[0] == "M" && f.size() >= 6) {
      uint64_t id = 0, ln = 0;
      if (!to_u64(f[1], &id) || id != ctx.modules.size() + 1 || id > kMaxNames ||
          !to_u64(f[5], &ln)) {
        fail("bad module");
        break;
      }
      ctx.modules.push_back({f[2].substr(0, 1024), f[3].substr(0, 256), f[4].substr(0, 4096),
                             static_cast<uint32_t>(std::min<uint64_t>(ln, UINT32_MAX))});
    } else if (v2 && f[0] == "S" && f.size() >= 5) {
      uint64_t id = 0, ln = 0;
      if (!to_u64(f[1], &id) || id != ctx.sites.size() + 1 || id > kMaxNames ||
          !to_u64(f[3], &ln)) {
        fail("bad site");
        break;
      }
      ctx.sites.push_back({f[2].substr(0, 4096), f[4].substr(0, 1024),
                           static_cast<uint32_t>(std::min<uint64_t>(ln, UINT32_MAX))});
    } else if (v2 && f[0] == "K" && f.size() >= 4) {
      uint64_t time = 0, kind = 0, id = 0;
      if (!to_u64(f[1], &time) || !to_u64(f[2], &kind) || !to_u64(f[3], &id) ||
          kind >= static_cast<uint64_t>(MarkKind::kCount) || id > UINT32_MAX) {
        fail("bad mark");
        break;
      }
      const auto mk = static_cast<MarkKind>(kind);
      const bool forward =
          mk == MarkKind::Forward || mk == MarkKind::ForwardEval || mk == MarkKind::ForwardEvalGrad;
      // A forward's id carries the autocast flag in its top bit and "inner module calls not
      // traced" in bit 30: kept apart.
      ctx.marks.push_back({to_mono(time), mk,
                           static_cast<uint32_t>(forward ? id & 0x3fffffffu : id),
                           forward && (id >> 31) != 0, forward && ((id >> 30) & 1) != 0});
    } else if (v2 && f[0] == "L" && f.size() >= 9) {
      TorchLabel l;
      uint64_t time = 0, device = 0;
      if (!to_u64(f[1], &time) || !to_u64(f[2], &device) || device >= 4096 ||
          !to_u64(f[3], &l.ptr) || !to_u64(f[4], &l.bytes)) {
        fail("bad label");
        break;
      }
      l.time_ns = to_mono(time);
      l.device = static_cast<uint32_t>(device);
      l.kind = f[5].substr(0, 16);
      l.name = f[6].substr(0, 1024);
      l.shape = f[7].substr(0, 256);
      l.dtype = f[8].substr(0, 64);
      ctx.labels.push_back(std::move(l));
    } else if (v2 && f[0] == "Q" && f.size() >= 4) {
      uint64_t device = 0, total = 0;
      double fraction = 0;
      auto [p, ec] = std::from_chars(f[2].data(), f[2].data() + f[2].size(), fraction);
      if (to_u64(f[1], &device) && device < 4096 && ec == std::errc() && to_u64(f[3], &total) &&
          fraction > 0 && fraction <= 1)
        ctx.limits[static_cast<uint32_t>(device)] = {fraction, total};
    } else if (v2 && f[0] == "X" && f.size() >= 5) {
      TorchException x;
      uint64_t time = 0;
      if (!to_u64(f[1], &time)) {
        fail("bad exception");
        break;
      }
      x.time_ns = to_mono(time);
      x.type = f[2].substr(0, 256);
      x.message = f[3].substr(0, 2048);
      size_t start = 0;
      const std::string& list = f[4];
      while (start < list.size() && x.frames.size() < 64) {
        size_t bar = list.find('|', start);
        std::string one =
            list.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
        // file:line:function, the file may hold ':' itself: split from the right.
        size_t c2 = one.rfind(':');
        size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : one.rfind(':', c2 - 1);
        uint64_t ln = 0;
        if (c1 != std::string::npos && to_u64(one.substr(c1 + 1, c2 - c1 - 1), &ln))
          x.frames.push_back({one.substr(0, c1), one.substr(c2 + 1),
                              static_cast<uint32_t>(std::min<uint64_t>(ln, UINT32_MAX))});
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      ctx.exception = std::move(x);
    } else if (v2 && f[0] == "J" && f.size() >= 7) {
      uint64_t device = 0;
      XlaPool x;
      if (!to_u64(f[1], &device) || device >= 4096 || !to_u64(f[2], &x.in_use) ||
          !to_u64(f[3], &x.peak_in_use) || !to_u64(f[4], &x.limit) || !to_u64(f[5], &x.reserved) ||
          !to_u64(f[6], &x.largest_alloc)) {
        fail("bad XLA statistics");
        break;
      }
      ctx.xla[static_cast<uint32_t>(device)] = x;
    } else if (f[0] == "P") {
      TorchPoolSegment seg;
      uint64_t device = 0;
      if (f.size() < 7 || !to_u64(f[1], &device) || device >= 4096 || !to_u64(f[2], &seg.address) ||
          !to_u64(f[3], &seg.bytes) || !to_u64(f[4], &seg.pool_id[0]) ||
          !to_u64(f[5], &seg.pool_id[1]) || (f[6] != "graph" && f[6] != "pool") ||
          ctx.pool_segments.size() >= kMaxNames) {
        fail("bad private pool segment");
        break;
      }
      seg.device = static_cast<uint32_t>(device);
      seg.cuda_graph = f[6] == "graph";
      ctx.pool_segments.push_back(seg);
    } else if (v2 && f[0] == "D" && f.size() >= 2) {
      to_u64(f[1], &ctx.dropped_marks);
    } else if (f[0] == "C" && f.size() >= 2) {
      ctx.alloc_conf = f[1].substr(0, 4096);
    } else if (f[0] == "END") {
      complete = true;
      break;
    } else if (!line.empty()) {
      fail("unknown record '" + f[0].substr(0, 16) + "'");
      break;
    }
  }
  // Before each wrapped device's window: its segments and blocks, made a nanosecond before
  // its first entry (with its pool record), so that the window's frees find what they free
  // and the state at the end is the allocator's.
  if (!wrapped.empty() && (!dump_blocks.empty() || !dump_segments.empty()) &&
      t.problem.rfind("PyTorch's trace buffer", 0) == 0)
    t.problem +=
        " (what was live before them is read from the allocator's state at the end; "
        "VRAMTRACE_TORCH_MAX_ENTRIES raises the size)";
  for (uint32_t dev : wrapped) {
    auto first = first_time.find(dev);
    if (first == first_time.end() || first->second < 2) continue;
    const uint64_t ts = first->second - 1;
    ctx.window_start[dev] = first->second;
    const uint64_t pool = kTorchPoolBase + dev;
    TorchEvent p;
    p.record.type = RecordType::UserPool;
    p.record.user_pool = {pool, dev, 0};
    p.record.time_ns = ts;
    events.push_back(p);
    std::vector<BeforeWindow> segs, blocks;
    for (const auto& x : segments_before)
      if (x.device == dev) segs.push_back(x);
    for (const auto& x : dump_segments) {
      // Not one the window made, nor one it mapped pieces of (expandable segments: the
      // snapshot's segment is the whole range, the window's maps are pieces of it).
      auto in = live_segments.lower_bound({dev, x.address});
      if (x.device == dev &&
          (in == live_segments.end() || in->first != dev || in->second >= x.address + x.bytes))
        segs.push_back(x);
    }
    for (const auto& x : blocks_before)
      if (x.device == dev) blocks.push_back(x);
    for (const auto& x : dump_blocks)
      if (x.device == dev && !live_blocks.count({dev, x.address})) blocks.push_back(x);
    for (const auto& x : segs) {
      TorchEvent e;
      e.record.type = RecordType::UserSegment;
      e.record.user_segment = {pool, x.address, x.bytes, format::SegmentOp::AddSegment};
      e.record.time_ns = ts;
      events.push_back(e);
      ctx.reserves.push_back({dev, x.address, ts, static_cast<int64_t>(x.bytes)});
    }
    for (const auto& x : blocks) {
      TorchEvent e;
      e.record.type = RecordType::UserBlock;
      e.record.user_block = {pool, x.address, x.bytes, 0};
      e.record.time_ns = ts;
      events.push_back(e);
      TorchBlock b{dev, x.address, x.bytes, ts, x.free_ns};
      b.before_window = true;
      ctx.blocks.push_back(b);
    }
  }
  // A version 2 file whose hook saw nothing of the program (no module, mark, label or private
  // pool) has no context to classify by.
  ctx.present = v2 && (!ctx.marks.empty() || !ctx.labels.empty() || !ctx.modules.empty() ||
                       !ctx.xla.empty() || !ctx.pool_segments.empty());
  std::stable_sort(ctx.marks.begin(), ctx.marks.end(),
                   [](const TorchMark& a, const TorchMark& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(ctx.labels.begin(), ctx.labels.end(),
                   [](const TorchLabel& a, const TorchLabel& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(
      ctx.reserves.begin(), ctx.reserves.end(),
      [](const TorchReserve& a, const TorchReserve& b) { return a.time_ns < b.time_ns; });
  if (!complete && t.problem.empty())
    t.problem = "cut short after " + std::to_string(entries) + " entries (no END line)";
  // Each device's entries are in time order; devices interleave. Records without a time of
  // their own (codes, pools) must stay before what refers to them: a stable sort by the time
  // of the next timed record keeps each group together.
  uint64_t next_time = UINT64_MAX;
  std::vector<std::pair<uint64_t, size_t>> order(events.size());
  for (size_t i = events.size(); i-- > 0;) {
    if (events[i].record.time_ns) next_time = events[i].record.time_ns;
    order[i] = {events[i].record.time_ns ? events[i].record.time_ns : next_time, i};
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  t.events.reserve(events.size());
  for (auto& [time, i] : order) t.events.push_back(std::move(events[i]));
  return t;
}

}  // namespace vramtrace::collector

// Reading PyTorch's allocator trace files (see torch_trace.h; their lines are declared in
// common/side_channel.h). Never trusts the input: every field is read as the table declares it,
// and a bad line does what its row says (most stop the reading there, saying which line).
#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vramtrace::collector {
namespace {

using format::RecordType;

constexpr size_t kMaxLine = 1 << 16;
// Modules, sites, private pools' segments: a corrupt file cannot make millions.
constexpr size_t kMaxNames = 1 << 20;
// The most requests a predicted step may hold (a bad count is corruption, not a step).
constexpr size_t kMaxRequests = 1 << 26;
// More bytes than any device has (256 TiB): a block, a segment or a batch this large was never
// made (a batch of B samples holds at least B bytes), and sums of such sizes cannot overflow.
constexpr uint64_t kMaxBytes = 1ull << 48;
// A request PyTorch's allocator failed on is an int64_t count of bytes.
constexpr uint64_t kMaxRequestBytes = (1ull << 63) - 1;

uint32_t clamp32(uint64_t v) { return static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX)); }

// The frames of an X line: file:line:function, separated by '|', at most 64.
std::vector<TorchSite> exception_frames(std::string_view list) {
  std::vector<TorchSite> out;
  size_t start = 0;
  while (start < list.size() && out.size() < 64) {
    const size_t bar = list.find('|', start);
    std::string_view one =
        list.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    // The file may hold ':' itself: split from the right.
    const size_t c2 = one.rfind(':');
    const size_t c1 =
        c2 == std::string_view::npos || c2 == 0 ? std::string_view::npos : one.rfind(':', c2 - 1);
    uint64_t ln = 0;
    if (c1 != std::string_view::npos &&
        side::field::whole_u64(one.substr(c1 + 1, c2 - c1 - 1), &ln))
      out.push_back({std::string(one.substr(0, c1)), std::string(one.substr(c2 + 1)), clamp32(ln)});
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

// Closes a file descriptor however read_more() leaves.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

TorchTraceReader::TorchTraceReader(std::string name) : name_(std::move(name)) {}

// ---- lines --------------------------------------------------------------------------------------

void TorchTraceReader::feed(std::string_view bytes) {
  while (!bytes.empty() && !stopped_) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(bytes);
      // A line this long is bad however it ends; the header line has no bound.
      if (header_read_ && pending_.size() > kMaxLine) {
        ++lineno_;
        fail("line too long");
      }
      return;
    }
    if (pending_.empty()) {
      line(bytes.substr(0, nl));
    } else {
      pending_.append(bytes.substr(0, nl));
      const std::string whole = std::move(pending_);
      pending_.clear();
      line(whole);
    }
    bytes.remove_prefix(nl + 1);
  }
}

void TorchTraceReader::line(std::string_view text) {
  if (!header_read_) return header(text);
  ++lineno_;
  if (text.size() > kMaxLine) return fail("line too long");
  const side::Split fields = side::split(text);
  const side::Kind kind = side::kind_of(fields.field[0]);
  if (kind == side::Kind::kCount || side::spec(kind).since > (v2_ ? 2 : 1)) return unknown(fields);
  using Dispatch = void (TorchTraceReader::*)(const side::Split&);
#define VRAMTRACE_SIDE_DISPATCH(Name, tag, since, on_bad, problem, fields) \
  &TorchTraceReader::dispatch<side::Name>,
  static constexpr Dispatch kDispatch[] = {
      VRAMTRACE_SIDE_LINES(VRAMTRACE_SIDE_DISPATCH, VRAMTRACE_SIDE_IGNORE, VRAMTRACE_SIDE_IGNORE)};
#undef VRAMTRACE_SIDE_DISPATCH
  (this->*kDispatch[static_cast<size_t>(kind)])(fields);
}

template <typename Line>
void TorchTraceReader::dispatch(const side::Split& fields) {
  const side::Spec& spec = side::spec(Line::kKind);
  Line l;
  const side::Decoded d =
      spec.on_bad == side::OnBad::Unread ? side::Decoded::Ok : side::decode(fields, l);
  if (d == side::Decoded::Short) {
    if (spec.on_bad == side::OnBad::Stop)
      fail(spec.problem);
    else if (spec.on_bad != side::OnBad::Lax)
      unknown(fields);  // not a line of this kind
    return;
  }
  why_.clear();
  if (d == side::Decoded::Ok && on(l)) return;
  if (spec.on_bad == side::OnBad::Stop || spec.on_bad == side::OnBad::Match)
    fail(why_.empty() ? std::string(spec.problem) : spec.problem + std::string(": ") + why_);
}

bool TorchTraceReader::bad(std::string why) {
  why_ = std::move(why);
  return false;
}

// A time of the hook's epoch clock on the header's monotonic one: false (said) for one before
// the traced host booted (the header's two clocks' difference), where the monotonic clock
// would wrap, and for one past what 64 bits of nanoseconds hold.
bool TorchTraceReader::monotonic(uint64_t epoch, uint64_t per_unit, uint64_t* out) {
  if (epoch > UINT64_MAX / per_unit)
    return bad("time " + std::to_string(epoch) + " is past 2^64 ns");
  const uint64_t ns = epoch * per_unit;
  if (ns < offset_)
    return bad("time " + std::to_string(epoch) + " is before the traced host started (its " +
               "clocks in the header)");
  *out = ns - offset_;
  return true;
}

void TorchTraceReader::unknown(const side::Split& fields) {
  if (fields.count == 1 && fields.field[0].empty()) return;  // an empty line
  fail("unknown record '" + std::string(fields.field[0].substr(0, 16)) + "'");
}

void TorchTraceReader::fail(const std::string& why) {
  trace_.problem = "line " + std::to_string(lineno_) + ": " + why;
  stopped_ = true;
  pending_.clear();
}

void TorchTraceReader::header(std::string_view text) {
  if (text.substr(0, std::strlen(side::kMagic)) != side::kMagic)
    throw TraceError(name_ + ": not a PyTorch allocator trace (no vramtrace.torch header)");
  const side::Split fields = side::split(text);
  v2_ = fields.field[0] == "vramtrace.torch/2";
  if (fields.field[0] != "vramtrace.torch/1" && !v2_)
    throw TraceError(name_ + ": PyTorch allocator trace of an unknown version (" +
                     std::string(fields.field[0]) + ")");
  side::Header h;
  if (side::decode(fields, h) != side::Decoded::Ok) throw TraceError(name_ + ": bad header line");
  trace_.pid = h.pid;
  trace_.torch_version = std::string(h.version);
  trace_.context.torch_version = trace_.torch_version;
  // Epoch - monotonic, ns; times are moved by it in unsigned arithmetic (modulo 2^64: the
  // same result, and a damaged file's huge times wrap instead of overflowing).
  offset_ = h.realtime_ns - h.monotonic_ns;
  header_read_ = true;
}

// ---- the allocator's trace: frames and entries -------------------------------------------------

bool TorchTraceReader::on(const side::Frame& f) {
  const Frame frame{next_id_++, clamp32(f.line)};
  frames_[f.id] = frame;
  std::string text;
  text.reserve(f.file.size() + f.function.size());
  text.append(f.file).append(f.function);
  TorchEvent code;
  code.text = std::make_shared<const std::string>(std::move(text));
  const std::string_view all = *code.text;
  code.record.type = RecordType::PyCode;
  code.record.py_code = {frame.code, all.substr(0, f.file.size()), all.substr(f.file.size())};
  trace_.events.push_back(std::move(code));
  return true;
}

void TorchTraceReader::pool_record(uint32_t device) {
  if (!pools_.insert(device).second) return;
  TorchEvent p;
  p.record.type = RecordType::UserPool;
  p.record.user_pool = {kTorchPoolBase + device, device, 0};  // named kTorchPoolName by its id
  trace_.events.push_back(std::move(p));
}

bool TorchTraceReader::on(const side::Entry& e) {
  uint64_t t = 0;
  if (!monotonic(e.time_us, 1000, &t)) return false;
  const std::string_view a = e.action;
  if (a == "oom") {
    if (e.bytes > kMaxRequestBytes)
      return bad("a request of " + std::to_string(e.bytes) + " bytes (more than an int64_t)");
  } else if (a == "alloc" || a == "free_completed" || a.rfind("segment_", 0) == 0) {
    if (e.bytes == 0 || e.bytes > kMaxBytes)
      return bad(std::string(a) + " of " + std::to_string(e.bytes) + " bytes");
  }
  ++entries_;
  if (gap_end_.count(e.device)) close_gap(e.device);
  TorchEvent event;
  if (!entry_record(e, &event))
    return true;  // free_requested, snapshot, ...: nothing changes hands
  format::Record& r = event.record;
  entry_order(e.device, r);
  entry_context(e, r, e.stream);
  pool_record(e.device);
  if ((r.type == RecordType::UserBlock && r.user_block.bytes) || r.type == RecordType::UserOom)
    entry_stack(e.frames, r.time_ns);
  trace_.events.push_back(std::move(event));
  return true;
}

bool TorchTraceReader::entry_record(const side::Entry& e, TorchEvent* event) const {
  format::Record& r = event->record;
  const uint64_t pool = kTorchPoolBase + e.device;
  r.time_ns = e.time_us * 1000 - offset_;  // in range: on() checked it
  const std::string_view a = e.action;
  if (a == "segment_alloc" || a == "segment_free" || a == "segment_map" || a == "segment_unmap") {
    r.type = RecordType::UserSegment;
    const format::SegmentOp op = a == "segment_alloc"  ? format::SegmentOp::AddSegment
                                 : a == "segment_free" ? format::SegmentOp::RemoveSegment
                                 : a == "segment_map"  ? format::SegmentOp::Map
                                                       : format::SegmentOp::Unmap;
    r.user_segment = {pool, e.address, e.bytes, op};
  } else if (a == "alloc" || a == "free_completed") {
    r.type = RecordType::UserBlock;
    r.user_block = {pool, e.address, a == "free_completed" ? 0 : e.bytes, 0};
    event->stream = e.stream;
  } else if (a == "oom") {
    r.type = RecordType::UserOom;
    r.user_oom = {pool, e.bytes, 0, e.device_free ? *e.device_free + 1 : 0};
  } else {
    return false;
  }
  return true;
}

// One device's entries are in the order they happened, with microsecond times: entries of one
// microsecond keep that order (a block freed just after another was made was live when it was
// made).
void TorchTraceReader::entry_order(uint32_t device, format::Record& r) {
  uint64_t& last = last_time_[device];
  if (r.time_ns <= last) r.time_ns = last + 1;
  last = r.time_ns;
  first_time_.try_emplace(device, r.time_ns);
}

void TorchTraceReader::entry_context(const side::Entry& e, const format::Record& r,
                                     uint64_t stream) {
  TorchContext& ctx = trace_.context;
  const uint32_t dev = e.device;
  if (r.type == RecordType::UserBlock) {
    const std::pair<uint32_t, uint64_t> key{dev, e.address};
    if (r.user_block.bytes) {
      live_blocks_[key] = ctx.blocks.size();
      ctx.blocks.push_back({dev, e.address, e.bytes, r.time_ns, UINT64_MAX, stream});
    } else if (auto it = live_blocks_.find(key); it != live_blocks_.end()) {
      ctx.blocks[it->second].free_ns = r.time_ns;
      live_blocks_.erase(it);
    } else if (wrapped_.count(dev)) {
      blocks_before_.push_back({dev, e.address, e.bytes, r.time_ns});
    }
  } else if (r.type == RecordType::UserSegment) {
    const auto op = r.user_segment.op;
    const bool grow = op == format::SegmentOp::AddSegment || op == format::SegmentOp::Map;
    if (grow) {
      live_segments_.insert({dev, e.address});
      if (op == format::SegmentOp::AddSegment) segment_bytes_[{dev, e.address}] = e.bytes;
    } else if (!live_segments_.erase({dev, e.address}) && wrapped_.count(dev)) {
      segments_before_.push_back({dev, e.address, e.bytes, r.time_ns});
    }
    if (op == format::SegmentOp::RemoveSegment) segment_bytes_.erase({dev, e.address});
    ctx.reserves.push_back({dev, e.address, r.time_ns,
                            grow ? static_cast<int64_t>(e.bytes) : -static_cast<int64_t>(e.bytes),
                            op == format::SegmentOp::Map || op == format::SegmentOp::Unmap});
  } else if (r.type == RecordType::UserOom) {
    ctx.ooms.push_back(r.time_ns);
    ctx.oom_requests.push_back(
        {dev, r.time_ns, e.bytes, stream, e.device_free.value_or(UINT64_MAX)});
  }
}

// The frames become a Python stack (outermost first in the tree), named just before the block
// or OOM it belongs to.
void TorchTraceReader::entry_stack(std::string_view frame_ids, uint64_t time_ns) {
  Frame stack[256];
  size_t n = 0;
  while (!frame_ids.empty() && n < std::size(stack)) {
    const size_t comma = frame_ids.find(',');
    uint64_t id = 0;
    if (side::field::whole_u64(frame_ids.substr(0, comma), &id)) {
      auto fr = frames_.find(id);
      if (fr != frames_.end()) stack[n++] = fr->second;
    }
    if (comma == std::string_view::npos) break;
    frame_ids.remove_prefix(comma + 1);
  }
  uint32_t parent = 0;
  while (n-- > 0) {
    const Frame& fr = stack[n];
    auto [node, added] = nodes_.try_emplace({parent, fr.code, fr.line}, 0);
    if (added) {
      node->second = next_id_++;
      TorchEvent e;
      e.record.type = RecordType::PyStackNode;
      e.record.py_stack_node = {node->second, parent, fr.code, fr.line};
      e.record.time_ns = time_ns;
      trace_.events.push_back(std::move(e));
    }
    parent = node->second;
  }
  if (parent) {
    TorchEvent e;
    e.record.type = RecordType::AllocStack;
    e.record.alloc_stack = {0, parent};
    e.record.time_ns = time_ns;
    trace_.events.push_back(std::move(e));
  }
}

bool TorchTraceReader::on(const side::Wrapped& w) {
  wrapped_.insert(w.device);
  trace_.problem = "PyTorch's trace buffer of device " + std::to_string(w.device) + " was full (" +
                   std::to_string(w.entries) + " entries): its earliest events are missing";
  return true;
}

bool TorchTraceReader::on(const side::DumpSegment& g) {
  dump_segments_.push_back({g.device, g.address, g.bytes});
  return true;
}

bool TorchTraceReader::on(const side::DumpBlock& a) {
  dump_blocks_.push_back({a.device, a.address, a.bytes});
  return true;
}

// ---- gaps: the trace off between the sampled iterations (--torch=sampled) ------------------

bool TorchTraceReader::on(const side::GapStart& o) {
  uint64_t t = 0;
  if (!monotonic(o.time_us, 1000, &t)) return false;
  if (gap_end_.count(o.device)) close_gap(o.device);
  gap_start_[o.device] = {t, o.peak_bytes};
  return true;
}

bool TorchTraceReader::on(const side::GapEnd& u) {
  uint64_t t = 0;
  if (!monotonic(u.time_us, 1000, &t)) return false;
  if (gap_end_.count(u.device)) close_gap(u.device);
  GapEnd& g = gap_end_[u.device];
  g.time_ns = t;
  g.peak = u.peak_bytes;
  return true;
}

bool TorchTraceReader::on(const side::DumpPeak& y) {
  if (y.peak_bytes) trace_.context.dump_peaks[y.device] = *y.peak_bytes;
  return true;
}

bool TorchTraceReader::on(const side::TraceCost& c) {
  trace_.context.trace_cost = TorchTraceCost{c.blocks, c.iteration_us * 1000, c.trace_us * 1000,
                                             c.budget_ppm, c.sampled != 0};
  return true;
}

bool TorchTraceReader::on(const side::GapSegment& h) {
  auto g = gap_end_.find(h.device);
  if (g == gap_end_.end()) return true;  // no gap's end before it: nothing to close
  if (g->second.segments.size() >= kMaxNames) return false;
  g->second.segments.push_back({h.address, h.bytes});
  return true;
}

bool TorchTraceReader::on(const side::GapBlock& b) {
  auto g = gap_end_.find(b.device);
  if (g == gap_end_.end()) return true;
  if (g->second.blocks.size() >= kMaxRequests) return false;
  g->second.blocks.push_back({b.address, b.bytes});
  return true;
}

void TorchTraceReader::close_gap(uint32_t dev) {
  auto node = gap_end_.extract(dev);
  GapEnd& g = node.mapped();
  TorchContext& ctx = trace_.context;
  uint64_t& last = last_time_[dev];
  TorchGap gap;
  gap.device = dev;
  gap.end_peak = g.peak;
  uint64_t start = last;
  if (auto s = gap_start_.find(dev); s != gap_start_.end()) {
    start = std::max(start, s->second.first);
    gap.start_peak = s->second.second;
    gap_start_.erase(s);
  }
  // Frees after every entry before the gap, makes after them (a clock a microsecond behind
  // cannot put a make before a free of the same address).
  gap.start_ns = start + 1;
  gap.end_ns = std::max(g.time_ns, gap.start_ns + 1);
  pool_record(dev);
  const uint64_t pool = kTorchPoolBase + dev;
  auto event = [&](uint64_t t) -> format::Record& {
    trace_.events.emplace_back();
    trace_.events.back().record.time_ns = t;
    return trace_.events.back().record;
  };
  std::map<uint64_t, uint64_t> blocks(g.blocks.begin(), g.blocks.end());
  for (auto it = live_blocks_.lower_bound({dev, 0});
       it != live_blocks_.end() && it->first.first == dev;) {
    TorchBlock& b = ctx.blocks[it->second];
    auto now = blocks.find(b.address);
    if (now != blocks.end() && now->second == b.bytes) {
      blocks.erase(now);  // live all through
      ++it;
      continue;
    }
    b.free_ns = gap.start_ns;
    format::Record& r = event(gap.start_ns);
    r.type = RecordType::UserBlock;
    r.user_block = {pool, b.address, 0, 0};
    it = live_blocks_.erase(it);
  }
  std::map<uint64_t, uint64_t> segments(g.segments.begin(), g.segments.end());
  for (auto it = segment_bytes_.lower_bound({dev, 0});
       it != segment_bytes_.end() && it->first.first == dev;) {
    auto now = segments.find(it->first.second);
    if (now != segments.end() && now->second == it->second) {
      segments.erase(now);
      ++it;
      continue;
    }
    format::Record& r = event(gap.start_ns);
    r.type = RecordType::UserSegment;
    r.user_segment = {pool, it->first.second, it->second, format::SegmentOp::RemoveSegment};
    ctx.reserves.push_back(
        {dev, it->first.second, gap.start_ns, -static_cast<int64_t>(it->second), false});
    live_segments_.erase(it->first);
    it = segment_bytes_.erase(it);
  }
  for (const auto& [address, bytes] : segments) {
    format::Record& r = event(gap.end_ns);
    r.type = RecordType::UserSegment;
    r.user_segment = {pool, address, bytes, format::SegmentOp::AddSegment};
    ctx.reserves.push_back({dev, address, gap.end_ns, static_cast<int64_t>(bytes), false});
    live_segments_.insert({dev, address});
    segment_bytes_[{dev, address}] = bytes;
  }
  for (const auto& [address, bytes] : blocks) {
    format::Record& r = event(gap.end_ns);
    r.type = RecordType::UserBlock;
    r.user_block = {pool, address, bytes, 0};
    live_blocks_[{dev, address}] = ctx.blocks.size();
    TorchBlock b{dev, address, bytes, gap.end_ns};
    b.in_gap = true;
    ctx.blocks.push_back(b);
  }
  last = gap.end_ns;
  first_time_.try_emplace(dev, gap.start_ns);
  ctx.gaps.push_back(gap);
}

std::optional<TorchGap> gap_of_peak(const TorchContext& ctx, uint32_t device) {
  uint64_t peak = 0;
  for (const TorchGap& g : ctx.gaps)
    if (g.device == device)
      peak = std::max({peak, g.start_peak.value_or(0), g.end_peak.value_or(0)});
  // The figure at the dump: a peak reached after the last gap, while the trace was on, is
  // higher than any gap's.
  if (auto d = ctx.dump_peaks.find(device); d != ctx.dump_peaks.end())
    peak = std::max(peak, d->second);
  if (!peak) return std::nullopt;
  for (const TorchGap& g : ctx.gaps)
    if (g.device == device && g.end_peak == peak && g.start_peak && *g.start_peak < peak) return g;
  return std::nullopt;
}

const TorchGap* gap_at(const TorchContext& ctx, uint32_t device, uint64_t t) {
  // The gaps are in order of their starts (finalize()), and one device's do not overlap: the
  // latest of `device` to start by t is the only one that can hold it.
  auto it = std::upper_bound(ctx.gaps.begin(), ctx.gaps.end(), t,
                             [](uint64_t v, const TorchGap& g) { return v < g.start_ns; });
  while (it != ctx.gaps.begin()) {
    const TorchGap& g = *--it;
    if (g.device == device) return t < g.end_ns ? &g : nullptr;
  }
  return nullptr;
}

// ---- what the hook saw of the program --------------------------------------------------------

bool TorchTraceReader::on(const side::Module& m) {
  auto& modules = trace_.context.modules;
  if (m.id != modules.size() + 1 || m.id > kMaxNames) return false;
  modules.push_back(
      {std::string(m.name), std::string(m.type), std::string(m.file), clamp32(m.line)});
  return true;
}

bool TorchTraceReader::on(const side::Site& s) {
  auto& sites = trace_.context.sites;
  if (s.id != sites.size() + 1 || s.id > kMaxNames) return false;
  sites.push_back({std::string(s.file), std::string(s.function), clamp32(s.line)});
  return true;
}

bool TorchTraceReader::on(const side::Mark& k) {
  if (k.kind >= static_cast<uint64_t>(MarkKind::kCount) || k.id > UINT32_MAX) return false;
  const auto kind = static_cast<MarkKind>(k.kind);
  const bool forward = kind == MarkKind::Forward || kind == MarkKind::ForwardEval ||
                       kind == MarkKind::ForwardEvalGrad;
  // A forward's id carries the autocast flag in its top bit and "inner module calls not
  // traced" in bit 30: kept apart.
  // A FedBack's id carries the count of tensors fed back in bits 24-31.
  const bool fed_back = kind == MarkKind::FedBack;
  trace_.context.marks.push_back({k.time_ns - offset_, kind,
                                  static_cast<uint32_t>(forward    ? k.id & 0x3fffffffu
                                                        : fed_back ? k.id & 0xffffffu
                                                                   : k.id),
                                  forward && (k.id >> 31) != 0, forward && ((k.id >> 30) & 1) != 0,
                                  fed_back ? static_cast<uint8_t>(k.id >> 24) : uint8_t{0}});
  return true;
}

bool TorchTraceReader::on(const side::Label& l) {
  TorchLabel label;
  label.time_ns = l.time_ns - offset_;
  label.device = l.device;
  label.ptr = l.ptr;
  label.bytes = l.bytes;
  label.kind = std::string(l.kind);
  label.name = std::string(l.name);
  label.shape = std::string(l.shape);
  label.dtype = std::string(l.dtype);
  trace_.context.labels.push_back(std::move(label));
  return true;
}

bool TorchTraceReader::on(const side::Limit& q) {
  if (!(q.fraction > 0 && q.fraction <= 1)) return false;
  trace_.context.limits[q.device] = {q.fraction, q.total_bytes};
  return true;
}

bool TorchTraceReader::on(const side::Exception& x) {
  TorchException e;
  e.time_ns = x.time_ns - offset_;
  e.type = std::string(x.type);
  e.message = std::string(x.message);
  e.frames = exception_frames(x.frames);
  trace_.context.exception = std::move(e);
  return true;
}

bool TorchTraceReader::on(const side::Xla& j) {
  trace_.context.xla[j.device] = {j.in_use, j.peak_in_use, j.limit, j.reserved, j.largest_alloc};
  return true;
}

bool TorchTraceReader::on(const side::PoolSegment& p) {
  auto& segments = trace_.context.pool_segments;
  if ((p.kind != "graph" && p.kind != "pool") || segments.size() >= kMaxNames) return false;
  TorchPoolSegment seg;
  seg.device = p.device;
  seg.address = p.address;
  seg.bytes = p.bytes;
  seg.pool_id[0] = p.pool_id_0;
  seg.pool_id[1] = p.pool_id_1;
  seg.cuda_graph = p.kind == "graph";
  segments.push_back(seg);
  return true;
}

bool TorchTraceReader::on(const side::Dropped& d) {
  trace_.context.dropped_marks = d.marks;
  return true;
}

bool TorchTraceReader::on(const side::AllocConf& c) {
  trace_.context.alloc_conf = std::string(c.conf);
  return true;
}

bool TorchTraceReader::on(const side::PredictedStep& n) {
  auto& steps = trace_.context.predicted_steps;
  if (n.id != steps.size() + 1 || n.id > kMaxNames) return false;
  if (n.batch > kMaxBytes || n.recorded_batch > kMaxBytes)
    return bad("a batch of " + std::to_string(std::max(n.batch, n.recorded_batch)) +
               " samples (more than any device has bytes)");
  TorchPredictedStep step;
  step.device = n.device;
  step.id = n.id;
  step.batch = n.batch;
  step.recorded_batch = n.recorded_batch;
  step.time_ns = n.time_ns - offset_;
  step.status = std::string(n.status);
  steps.push_back(std::move(step));
  return true;
}

bool TorchTraceReader::on(const side::PredictedChange& v) {
  // A change of no step declared has nothing to weigh: left out, as its requests are.
  auto& steps = trace_.context.predicted_steps;
  if (v.step == 0 || v.step > steps.size()) return true;
  if (!steps[v.step - 1].change.empty() ||
      (v.change != "none" && v.change != "bf16_autocast" && v.change != "checkpoint"))
    return false;
  TorchPredictedStep& step = steps[v.step - 1];
  step.change = std::string(v.change);
  if (v.change != "checkpoint") return true;
  std::string_view ids = v.modules;
  while (!ids.empty()) {
    const size_t comma = ids.find(',');
    const std::string_view id = ids.substr(0, comma);
    uint64_t m = 0;
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), m);
    if (ec != std::errc() || end != id.data() + id.size() || m == 0 || m > UINT32_MAX) return false;
    step.modules.push_back(static_cast<uint32_t>(m));
    ids = comma == std::string_view::npos ? std::string_view() : ids.substr(comma + 1);
  }
  return !step.modules.empty();
}

bool TorchTraceReader::on(const side::PredictedRequest& r) {
  if (r.block == 0 || r.block > kMaxRequests || r.module > UINT32_MAX ||
      (r.op != "a" && r.op != "f") || r.phase.size() != 1 ||
      std::string_view("flbs").find(r.phase[0]) == std::string_view::npos)
    return false;
  // A request of no step declared, or of one the hook could not predict, has nothing to
  // complete: left out.
  auto& steps = trace_.context.predicted_steps;
  if (r.step == 0 || r.step > steps.size() || steps[r.step - 1].status != "ok") return true;
  TorchPredictedStep& step = steps[r.step - 1];
  if (step.requests.size() >= kMaxRequests) return false;
  // The hook numbers a step's blocks as it makes them: a block made out of turn, or freed
  // before it was made, is not the hook's (and a number far past the count would size every
  // replay's tables by it).
  if (r.op == "a" && r.block != step.blocks + 1)
    return bad("block " + std::to_string(r.block) + " made where block " +
               std::to_string(step.blocks + 1) + " comes next");
  if (r.op == "f" && r.block > step.blocks)
    return bad("block " + std::to_string(r.block) + " freed before it was made");
  if (r.bytes > kMaxBytes) return bad("a block of " + std::to_string(r.bytes) + " bytes");
  step.blocks += r.op == "a";
  step.requests.push_back(
      {r.op == "f", r.block, r.bytes, static_cast<uint32_t>(r.module), r.phase[0]});
  return true;
}

bool TorchTraceReader::on(const side::PlanStop& z) {
  TorchPlanStop stop;
  stop.time_ns = z.time_ns - offset_;
  stop.batch = z.batch;
  stop.spent_ns = z.spent_ns;
  stop.rng_restored = z.rng_restored != 0;
  stop.loss = std::string(z.loss);
  trace_.context.plan_stop = std::move(stop);
  return true;
}

bool TorchTraceReader::on(const side::PlanNote& n) {
  if (trace_.context.plan_notes.size() < 64) trace_.context.plan_notes.emplace_back(n.note);
  return true;
}

bool TorchTraceReader::on(const side::StepAssumption& a) {
  if (trace_.context.step_assumptions.size() < 16)
    trace_.context.step_assumptions.emplace_back(a.note);
  return true;
}

bool TorchTraceReader::on(const side::Preflight& p) {
  TorchPlanStop at;
  at.time_ns = p.time_ns > offset_ ? p.time_ns - offset_ : 0;  // a figure said, not replayed
  at.batch = p.batch;
  at.spent_ns = p.spent_ns;
  at.rng_restored = p.rng_restored != 0;
  at.loss = std::string(p.loss);
  trace_.context.preflight = std::move(at);
  return true;
}

bool TorchTraceReader::on(const side::End&) {
  complete_ = true;
  stopped_ = true;
  pending_.clear();
  return true;
}

// ---- the end: the window before a wrapped ring's, time order
// -------------------------------------

// Before a wrapped device's window: its segments and blocks, made a nanosecond before its first
// entry (with its pool record), so that the window's frees find what they free and the state at
// the end is the allocator's.
void TorchTraceReader::add_before_window(uint32_t dev) {
  TorchContext& ctx = trace_.context;
  auto first = first_time_.find(dev);
  if (first == first_time_.end() || first->second < 2) return;
  const uint64_t ts = first->second - 1;
  ctx.window_start[dev] = first->second;
  const uint64_t pool = kTorchPoolBase + dev;
  TorchEvent p;
  p.record.type = RecordType::UserPool;
  p.record.user_pool = {pool, dev, 0};
  p.record.time_ns = ts;
  trace_.events.push_back(std::move(p));
  std::vector<BeforeWindow> segs, blocks;
  for (const auto& x : segments_before_)
    if (x.device == dev) segs.push_back(x);
  for (const auto& x : dump_segments_) {
    // Not one the window made, nor one it mapped pieces of (expandable segments: the
    // snapshot's segment is the whole range, the window's maps are pieces of it).
    auto in = live_segments_.lower_bound({dev, x.address});
    if (x.device == dev &&
        (in == live_segments_.end() || in->first != dev || in->second >= x.address + x.bytes))
      segs.push_back(x);
  }
  for (const auto& x : blocks_before_)
    if (x.device == dev) blocks.push_back(x);
  for (const auto& x : dump_blocks_)
    if (x.device == dev && !live_blocks_.count({dev, x.address})) blocks.push_back(x);
  for (const auto& x : segs) {
    TorchEvent e;
    e.record.type = RecordType::UserSegment;
    e.record.user_segment = {pool, x.address, x.bytes, format::SegmentOp::AddSegment};
    e.record.time_ns = ts;
    trace_.events.push_back(std::move(e));
    ctx.reserves.push_back({dev, x.address, ts, static_cast<int64_t>(x.bytes)});
  }
  for (const auto& x : blocks) {
    TorchEvent e;
    e.record.type = RecordType::UserBlock;
    e.record.user_block = {pool, x.address, x.bytes, 0};
    e.record.time_ns = ts;
    trace_.events.push_back(std::move(e));
    TorchBlock b{dev, x.address, x.bytes, ts, x.free_ns};
    b.before_window = true;
    ctx.blocks.push_back(b);
  }
}

void TorchTraceReader::finalize() {
  TorchContext& ctx = trace_.context;
  if (!wrapped_.empty() && (!dump_blocks_.empty() || !dump_segments_.empty()) &&
      trace_.problem.rfind("PyTorch's trace buffer", 0) == 0)
    trace_.problem +=
        " (what was live before them is read from the allocator's state at the end; "
        "VRAMTRACE_TORCH_MAX_ENTRIES raises the size)";
  while (!gap_end_.empty()) close_gap(gap_end_.begin()->first);
  for (uint32_t dev : wrapped_) add_before_window(dev);
  // A version 2 file whose hook saw nothing of the program (no module, mark, label or private
  // pool) has no context to classify by.
  ctx.present = v2_ && (!ctx.marks.empty() || !ctx.labels.empty() || !ctx.modules.empty() ||
                        !ctx.xla.empty() || !ctx.pool_segments.empty());
  std::stable_sort(ctx.marks.begin(), ctx.marks.end(),
                   [](const TorchMark& a, const TorchMark& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(ctx.labels.begin(), ctx.labels.end(),
                   [](const TorchLabel& a, const TorchLabel& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(ctx.gaps.begin(), ctx.gaps.end(),
                   [](const TorchGap& a, const TorchGap& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(
      ctx.reserves.begin(), ctx.reserves.end(),
      [](const TorchReserve& a, const TorchReserve& b) { return a.time_ns < b.time_ns; });
  if (!complete_ && trace_.problem.empty())
    trace_.problem = "cut short after " + std::to_string(entries_) + " entries (no END line)";
  // Each device's entries are in time order; devices interleave. Records without a time of
  // their own (codes, pools) must stay before what refers to them: a stable sort by the time
  // of the next timed record keeps each group together.
  std::vector<TorchEvent>& events = trace_.events;
  uint64_t next_time = UINT64_MAX;
  std::vector<std::pair<uint64_t, size_t>> order(events.size());
  for (size_t i = events.size(); i-- > 0;) {
    if (events[i].record.time_ns) next_time = events[i].record.time_ns;
    order[i] = {events[i].record.time_ns ? events[i].record.time_ns : next_time, i};
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<TorchEvent> sorted;
  sorted.reserve(events.size());
  for (auto& [time, i] : order) sorted.push_back(std::move(events[i]));
  events = std::move(sorted);
}

TorchTrace TorchTraceReader::trace() const {
  if (!header_read_) throw TraceError(name_ + ": no header line read yet");
  TorchTraceReader copy(*this);
  copy.finalize();
  return std::move(copy.trace_);
}

TorchTrace TorchTraceReader::finish() {
  if (!stopped_ && !pending_.empty()) {
    const std::string last = std::move(pending_);
    pending_.clear();
    line(last);
  }
  if (!header_read_)
    throw TraceError(name_ + ": not a PyTorch allocator trace (no vramtrace.torch header)");
  finalize();
  return std::move(trace_);
}

// ---- files
// ---------------------------------------------------------------------------------------

TorchTraceReader::Tail TorchTraceReader::read_more(const std::string& path) {
  Fd f{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw TraceError(path + ": cannot open");
  struct stat st {};
  if (fstat(f.fd, &st) != 0) throw TraceError(path + ": cannot open");
  Tail result = Tail::Nothing;
  const bool replaced = file_dev_ != static_cast<uint64_t>(st.st_dev) ||
                        file_ino_ != static_cast<uint64_t>(st.st_ino) ||
                        static_cast<uint64_t>(st.st_size) < file_offset_;
  if (file_offset_ > 0 && replaced) {
    *this = TorchTraceReader(name_);
    result = Tail::Restarted;
  }
  file_dev_ = st.st_dev;
  file_ino_ = st.st_ino;
  // Read errors (a folder, an I/O error) end the file where they happen, as for a reader of
  // lines.
  std::vector<char> buf(1 << 20);
  while (!stopped_) {
    const ssize_t n = pread(f.fd, buf.data(), buf.size(), static_cast<off_t>(file_offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    file_offset_ += static_cast<uint64_t>(n);
    if (result == Tail::Nothing) result = Tail::More;
    feed({buf.data(), static_cast<size_t>(n)});
  }
  return result;
}

TorchTrace read_torch_trace(const std::string& path) {
  TorchTraceReader reader(path);
  reader.read_more(path);
  return reader.finish();
}

}  // namespace vramtrace::collector

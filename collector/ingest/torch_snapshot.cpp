// A PyTorch memory snapshot read as a run of one process (torch_snapshot.h). The snapshot's dict
// is read defensively (a key missing or of another type is a default, as PyTorch's versions
// differ: 2.1 wrote no allocator_settings, later ones add compile_context, user_metadata and
// external_annotations), and written as the start-up hook's side channel (common/side_channel.h),
// which the side channel's own reader reads: one reader of PyTorch's trace entries, whichever
// way they came.
#include "collector/ingest/torch_snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "collector/analysis/stacks.h"
#include "collector/ingest/pickle.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/ingest/trace_reader.h"
#include "common/format.h"

namespace vramtrace::collector {
namespace {

using Index = PickleValues::Index;
using Kind = PickleValues::Kind;
namespace rec = format::rec;

constexpr Index npos = PickleValues::npos;
// The frames of an entry kept (the side channel's reader keeps as many).
constexpr size_t kMaxFrames = 256;
// The hook's monotonic clock for a snapshot: its first entry at 1 s.
constexpr uint64_t kFirstNs = 1'000'000'000ull;

// A text field of a side-channel line: no tab or newline inside (the hook's own cleaning).
std::string field(std::string_view s, size_t keep = 4096) {
  std::string out(s.substr(0, keep));
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

struct Walk {
  const PickleValues& v;
  std::string name;
  // Every dict the walk reads as an entry, a segment or a block is a value of its own: one
  // reached again through the memo is not read again, so that a pickle that names one list a
  // million times costs what its bytes do.
  std::set<Index> seen;

  [[noreturn]] void fail(const std::string& why) const {
    throw TraceError(name + ": not a PyTorch memory snapshot (" + why + ")");
  }
  Index get(Index d, std::string_view key) const { return d == npos ? npos : v.get(d, key); }
  bool is(Index x, Kind k) const { return x != npos && v.kind(x) == k; }
  // An int field (a bool counts), or `dflt` when absent or of another type.
  int64_t integer(Index d, std::string_view key, int64_t dflt = 0) const {
    const Index x = get(d, key);
    return x != npos && v.is_int(x) ? v.int_of(x) : dflt;
  }
  uint64_t unsigned_of(Index d, std::string_view key) const {
    const int64_t i = integer(d, key);
    return i < 0 ? 0 : static_cast<uint64_t>(i);
  }
  std::string_view text(Index d, std::string_view key) const {
    const Index x = get(d, key);
    return is(x, Kind::Str) ? v.str_of(x) : std::string_view();
  }
  const std::vector<Index>& list(Index d, std::string_view key) const {
    static const std::vector<Index> none;
    const Index x = get(d, key);
    return is(x, Kind::List) || is(x, Kind::Tuple) ? v.items(x) : none;
  }
  bool first_visit(Index x) { return seen.insert(x).second; }
};

// One device's entries, as read.
struct Entry {
  std::string action;
  uint64_t address = 0, bytes = 0, stream = 0, time_us = 0;
  bool timed = false;
  std::optional<uint64_t> device_free;
  Index frames = npos;
};

// The phase an alloc entry's frames say made its block (docs/SNAPSHOTS.md, "Categories").
enum class Made : uint8_t { Unknown, User, Forward, Backward, Step };

struct FrameText {
  std::string_view file, name;
  uint32_t line = 0;
};

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(std::string_view s, std::string_view head) {
  return s.compare(0, head.size(), head) == 0;
}

// What an alloc's frames (innermost first) say of it.
struct Reading {
  Made made = Made::Unknown;
  bool parameter = false;  // made by torch.nn outside forward, backward and step
  bool gradient = false;   // made by the autograd engine's AccumulateGrad
  bool native = false;     // it holds C++ frames (stacks="all")
  // The user's line: of the call into the model or the optimizer for a forward or a step, the
  // innermost frame of the program's own code otherwise (stacks.cpp's rule).
  std::optional<FrameText> site;
  std::string root;  // a forward's outermost module: its forward's file and function
  std::optional<FrameText> root_frame;
};

Reading read_frames(const std::vector<FrameText>& fr) {
  Reading r;
  bool python = false, backward = false, step = false;
  int outer_call = -1, outer_optim = -1;
  for (size_t i = 0; i < fr.size(); ++i) {
    const FrameText& f = fr[i];
    const bool native = is_native_source_file(std::string(f.file));
    r.native |= native;
    python |= !native;
    if (native) {
      // The autograd engine's worker (evaluate_function, thread_main) or the caller's
      // Engine::execute; a gradient is made by AccumulateGrad.
      backward |= f.name.find("torch::autograd::Engine::") != std::string_view::npos ||
                  f.name.find("torch::autograd::python::PythonEngine::") != std::string_view::npos;
      r.gradient |= f.name.find("torch::autograd::AccumulateGrad") != std::string_view::npos;
      continue;
    }
    if ((ends_with(f.file, "torch/_tensor.py") && f.name == "backward") ||
        (ends_with(f.file, "torch/autograd/__init__.py") &&
         (f.name == "backward" || f.name == "grad")) ||
        (ends_with(f.file, "torch/autograd/graph.py") && f.name == "_engine_run_backward"))
      backward = true;
    if (f.file.find("torch/optim/") != std::string_view::npos &&
        (f.name == "step" || starts_with(f.name, "_single_tensor_") ||
         starts_with(f.name, "_multi_tensor_") || starts_with(f.name, "_fused_"))) {
      step = true;
      outer_optim = static_cast<int>(i);
    }
    if (ends_with(f.file, "torch/nn/modules/module.py") &&
        (f.name == "_call_impl" || f.name == "_wrapped_call_impl"))
      outer_call = static_cast<int>(i);
    // A module's parameters and buffers: made by its constructor or its initialisers, or
    // moved by Module.to / .cuda (its _apply).
    if ((ends_with(f.file, "torch/nn/modules/module.py") &&
         (f.name == "_apply" || f.name == "to" || f.name == "cuda" || f.name == "to_empty")) ||
        (f.file.find("torch/nn/modules/") != std::string_view::npos &&
         (f.name == "__init__" || f.name == "reset_parameters")) ||
        ends_with(f.file, "torch/nn/init.py") || ends_with(f.file, "torch/nn/parameter.py"))
      r.parameter = true;
  }
  // The first frame outside `from` (outwards) that is the program's own.
  auto user_from = [&](size_t from) -> std::optional<FrameText> {
    for (size_t i = from; i < fr.size(); ++i)
      if (!is_framework_file(std::string(fr[i].file))) return fr[i];
    return std::nullopt;
  };
  if (backward) {
    r.made = Made::Backward;
  } else if (step) {
    r.made = Made::Step;
    r.site = user_from(static_cast<size_t>(outer_optim) + 1);
  } else if (outer_call >= 0) {
    r.made = Made::Forward;
    r.site = user_from(static_cast<size_t>(outer_call) + 1);
    for (int i = outer_call - 1; i >= 0; --i)
      if (!ends_with(fr[static_cast<size_t>(i)].file, "torch/nn/modules/module.py")) {
        const FrameText& f = fr[static_cast<size_t>(i)];
        r.root = std::string(f.file) + '\0' + std::string(f.name);
        r.root_frame = f;
        break;
      }
  } else if (python) {
    r.made = Made::User;
    r.site = user_from(0);
  }
  r.parameter = r.parameter && r.made == Made::User;
  r.gradient = r.gradient && r.made == Made::Backward;
  return r;
}

}  // namespace

bool starts_as_pickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char head[2] = {};
  in.read(reinterpret_cast<char*>(head), 2);
  return in.gcount() == 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
}

TorchSnapshot torch_snapshot_of(std::string_view bytes, const std::string& name, uint64_t pid) {
  Unpickled u;
  try {
    u = unpickle(bytes);
  } catch (const PickleError& e) {
    throw TraceError(name + ": " + e.what());
  }
  Walk w{u.values, name, {}};
  const Index root = u.root;
  if (!w.is(root, Kind::Dict)) w.fail("its pickle holds no dict");
  const Index segments = w.get(root, "segments");
  const Index traces = w.get(root, "device_traces");
  if (!w.is(segments, Kind::List) && !w.is(traces, Kind::List))
    w.fail("neither \"segments\" nor \"device_traces\"");
  TorchSnapshot out;

  // ---- the entries, per device ----
  std::vector<std::vector<Entry>> devices;
  std::set<std::string> entry_keys;
  bool expandable_seen = false;
  if (w.is(traces, Kind::List)) {
    const auto& per_device = u.values.items(traces);
    if (per_device.size() > side::kMaxDevice) w.fail("more devices than a host has");
    for (Index trace : per_device) {
      devices.emplace_back();
      if (!w.is(trace, Kind::List) || !w.first_visit(trace)) continue;
      for (Index e : u.values.items(trace)) {
        if (!w.is(e, Kind::Dict) || !w.first_visit(e)) continue;
        Entry x;
        x.action = std::string(w.text(e, "action"));
        x.address = w.unsigned_of(e, "addr");
        x.bytes = w.unsigned_of(e, "size");
        x.stream = w.unsigned_of(e, "stream");
        const Index t = w.get(e, "time_us");
        x.timed = t != npos && u.values.is_int(t) && u.values.int_of(t) > 0;
        x.time_us = x.timed ? static_cast<uint64_t>(u.values.int_of(t)) : 0;
        const Index free = w.get(e, "device_free");
        if (free != npos && u.values.is_int(free) && u.values.int_of(free) >= 0)
          x.device_free = static_cast<uint64_t>(u.values.int_of(free));
        const Index frames = w.get(e, "frames");
        if (w.is(frames, Kind::List)) x.frames = frames;
        expandable_seen |= x.action == "segment_map" || x.action == "segment_unmap";
        const auto& kv = u.values.items(e);
        for (size_t i = 0; i + 1 < kv.size() && entry_keys.size() < 32; i += 2)
          if (w.is(kv[i], Kind::Str)) entry_keys.insert(field(u.values.str_of(kv[i]), 64));
        devices.back().push_back(std::move(x));
      }
    }
  }

  // Times: PyTorch's time_us (the epoch's, microseconds) where an entry has one; an entry
  // without (PyTorch before time_us, or a damaged one) a microsecond after the one before, so
  // that the order holds. The first entry is put at 1 s of the side channel's monotonic clock.
  uint64_t t0 = UINT64_MAX;
  size_t untimed = 0, entries = 0;
  for (auto& dev : devices) {
    uint64_t last = 0;
    for (Entry& x : dev) {
      ++entries;
      if (!x.timed) ++untimed;
      x.time_us = x.timed ? std::max(x.time_us, last) : last + 1;
      last = x.time_us;
      t0 = std::min(t0, x.time_us);
    }
  }
  if (t0 == UINT64_MAX) t0 = kFirstNs / 1000;
  // Times before 1 s of the epoch (entries without time_us) are moved on to it: the side
  // channel's clocks cannot put an entry before its header's monotonic start.
  if (t0 < kFirstNs / 1000) {
    const uint64_t shift = kFirstNs / 1000 - t0;
    for (auto& dev : devices)
      for (Entry& x : dev) x.time_us += shift;
    t0 += shift;
  }
  // ---- phases, from the allocs' frames ----
  // A snapshot has none of the hook's marks: each alloc's frames say whether the autograd
  // engine, an optimizer's step, a module's forward or the program's own code made its block;
  // the runs of allocs of one phase become the hook's phase marks (forward, backward, step),
  // with the user's line that called it, so that torch_memory.cpp categorizes a snapshot's
  // blocks by their lives as it does a recorded run's.
  struct Alloc {
    size_t dev = 0, i = 0;
    Reading r;
  };
  std::vector<Alloc> allocs;
  bool any_frames = false, any_native = false;
  for (size_t d = 0; d < devices.size(); ++d)
    for (size_t i = 0; i < devices[d].size(); ++i) {
      const Entry& x = devices[d][i];
      if (x.action != "alloc") continue;
      std::vector<FrameText> fr;
      if (x.frames != npos)
        for (Index f : u.values.items(x.frames)) {
          if (fr.size() >= kMaxFrames) break;
          if (!w.is(f, Kind::Dict)) continue;
          const int64_t ln = w.integer(f, "line");
          fr.push_back({w.text(f, "filename"), w.text(f, "name"),
                        ln < 0 || ln > UINT32_MAX ? 0u : static_cast<uint32_t>(ln)});
        }
      any_frames |= !fr.empty();
      allocs.push_back({d, i, read_frames(fr)});
      any_native |= allocs.back().r.native;
    }
  std::stable_sort(allocs.begin(), allocs.end(), [&](const Alloc& a, const Alloc& b) {
    return devices[a.dev][a.i].time_us < devices[b.dev][b.i].time_us;
  });
  // A phase's run: allocs of one phase (a forward's of one model called from one line).
  auto run_key = [](const Reading& r) {
    std::string k(1, static_cast<char>('0' + static_cast<int>(r.made)));
    if (r.made == Made::Forward && r.site)
      k += r.root + '\0' + std::string(r.site->file) + ':' + std::to_string(r.site->line);
    return k;
  };
  std::vector<bool> starts(allocs.size(), false);
  for (size_t k = 0; k < allocs.size(); ++k) {
    const Made m = allocs[k].r.made;
    starts[k] = (m == Made::Forward || m == Made::Backward || m == Made::Step) &&
                (k == 0 || run_key(allocs[k].r) != run_key(allocs[k - 1].r));
  }
  // A run's first alloc in the microsecond of the entry before it is moved on by 1 us: the
  // phase's mark falls between the two (entries' times are whole microseconds).
  {
    std::set<std::pair<size_t, size_t>> first;
    for (size_t k = 0; k < allocs.size(); ++k)
      if (starts[k]) first.insert({allocs[k].dev, allocs[k].i});
    for (size_t d = 0; d < devices.size(); ++d) {
      uint64_t prev = 0;
      for (size_t i = 0; i < devices[d].size(); ++i) {
        Entry& x = devices[d][i];
        if (i > 0 && first.count({d, i}) && x.time_us <= prev) x.time_us = prev + 1;
        x.time_us = std::max(x.time_us, prev);
        prev = x.time_us;
      }
    }
  }
  uint64_t last_us = 0;
  for (const auto& dev : devices)
    if (!dev.empty()) last_us = std::max(last_us, dev.back().time_us);

  // Epoch microseconds past what 64 bits of nanoseconds hold are a damaged file.
  constexpr uint64_t kMaxUs = (UINT64_MAX - kFirstNs) / 1000;
  for (auto& dev : devices)
    for (Entry& x : dev)
      if (x.time_us > kMaxUs) w.fail("an entry's time_us past 2^64 ns");
  const uint64_t realtime_ns = t0 * 1000;
  const uint64_t monotonic_ns = kFirstNs;

  // ---- the allocator's settings ----
  std::string conf;
  const Index settings = w.get(root, "allocator_settings");
  const bool has_settings = w.is(settings, Kind::Dict);
  if (has_settings) {
    conf = field(w.text(settings, "PYTORCH_CUDA_ALLOC_CONF"));
    if (conf.empty()) {
      // The string PyTorch was given is gone (set through another name, or by
      // torch.cuda.memory._set_allocator_settings): the settings said as values.
      std::string parts;
      auto add = [&](const std::string& p) { parts += (parts.empty() ? "" : ",") + p; };
      if (w.integer(settings, "expandable_segments")) add("expandable_segments:True");
      const int64_t split = w.integer(settings, "max_split_size");
      if (split > 0 && split < (int64_t{1} << 50))
        add("max_split_size_mb:" + std::to_string(split >> 20));
      const Index gc = w.get(settings, "garbage_collection_threshold");
      if (w.is(gc, Kind::Float) && u.values.float_of(gc) > 0 && u.values.float_of(gc) < 1) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", u.values.float_of(gc));
        add(std::string("garbage_collection_threshold:") + buf);
      }
      conf = parts;
    }
  }
  bool segment_expandable = false;
  if (w.is(segments, Kind::List))
    for (Index s : u.values.items(segments))
      segment_expandable |= w.integer(s, "is_expandable") != 0;
  bool conf_inferred = false;
  if (!has_settings && (expandable_seen || segment_expandable)) {
    conf = "expandable_segments:True";
    conf_inferred = true;
  }

  // ---- the side channel ----
  std::string text;
  char line[256];
  std::snprintf(line, sizeof line, "vramtrace.torch/2\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t",
                pid, realtime_ns, monotonic_ns);
  text += line;
  text += "memory snapshot\n";
  if (!conf.empty()) text += "C\t" + conf + "\n";
  // Frames: each once, by an id; a frames list reached again is the same ids.
  std::map<std::tuple<std::string, uint64_t, std::string>, uint64_t> frame_ids;
  std::unordered_map<Index, std::string> ids_of_list;
  auto frame_list = [&](Index frames) -> const std::string& {
    auto [it, added] = ids_of_list.try_emplace(frames);
    if (!added) return it->second;
    std::string ids;
    const auto& items = u.values.items(frames);
    for (size_t i = 0; i < items.size() && i < kMaxFrames; ++i) {
      const Index f = items[i];
      if (!w.is(f, Kind::Dict)) continue;
      const int64_t ln = w.integer(f, "line");
      auto key = std::make_tuple(field(w.text(f, "filename")), ln < 0 ? 0 : uint64_t(ln),
                                 field(w.text(f, "name")));
      auto [fid, fresh] = frame_ids.try_emplace(key, frame_ids.size() + 1);
      if (fresh) {
        text += "F\t" + std::to_string(fid->second) + "\t" + std::get<0>(key) + "\t" +
                std::to_string(std::get<1>(key)) + "\t" + std::get<2>(key) + "\n";
      }
      ids += (ids.empty() ? "" : ",") + std::to_string(fid->second);
    }
    it->second = std::move(ids);
    return it->second;
  };
  // The phases' marks (the hook's K lines, on the epoch's clock as its entries are), its
  // modules (M) and sites (S); named storages (L) for what torch.nn made outside the phases
  // (parameters and buffers) and what AccumulateGrad made (gradients).
  {
    std::map<std::string, uint64_t> modules;
    std::map<std::tuple<std::string, uint32_t, std::string>, uint64_t> sites;
    auto site_id = [&](const std::optional<FrameText>& f) -> uint64_t {
      if (!f) return 0;
      auto key = std::make_tuple(field(f->file), f->line, field(f->name));
      auto [it, fresh] = sites.try_emplace(key, sites.size() + 1);
      if (fresh)
        text += "S\t" + std::to_string(it->second) + "\t" + std::get<0>(key) + "\t" +
                std::to_string(f->line) + "\t" + std::get<2>(key) + "\n";
      return it->second;
    };
    auto mark = [&](uint64_t ns, MarkKind kind, uint64_t id) {
      text += "K\t" + std::to_string(ns) + "\t" + std::to_string(static_cast<int>(kind)) + "\t" +
              std::to_string(id) + "\n";
    };
    bool training = false;
    for (const Alloc& a : allocs) training |= a.r.made == Made::Backward || a.r.made == Made::Step;
    // Without a backward or an optimizer's step anywhere, a forward is an evaluation's
    // (nothing it keeps is an activation that a backward will read).
    const MarkKind forward = training ? MarkKind::Forward : MarkKind::ForwardEval;
    auto us = [&](const Alloc& a) { return devices[a.dev][a.i].time_us; };
    for (size_t k = 0; k < allocs.size(); ++k) {
      const Alloc& a = allocs[k];
      const Entry& x = devices[a.dev][a.i];
      if (a.r.made == Made::User) {
        if (a.r.parameter || a.r.site) {
          // A user's .to / .cuda: a move, with its line (an input's site).
          const uint64_t site = site_id(a.r.site);
          if (site) mark(x.time_us * 1000 - 400, MarkKind::Site, site);
          mark(x.time_us * 1000 - 400, MarkKind::Move, 0);
          mark(x.time_us * 1000 + 400, MarkKind::MoveEnd, 0);
        }
        if (a.r.parameter)
          text += "L\t" + std::to_string(x.time_us * 1000 + 1) + "\t" + std::to_string(a.dev) +
                  "\t" + std::to_string(x.address) + "\t" + std::to_string(x.bytes) + "\tparam\t" +
                  (a.r.site ? field(a.r.site->file) + ":" + std::to_string(a.r.site->line) : "") +
                  "\t\t\n";
        continue;
      }
      if (a.r.gradient)
        text += "L\t" + std::to_string(x.time_us * 1000 + 1) + "\t" + std::to_string(a.dev) + "\t" +
                std::to_string(x.address) + "\t" + std::to_string(x.bytes) + "\tgrad\t\t\t\n";
      if (!starts[k]) continue;
      size_t end = k + 1;
      while (end < allocs.size() && !starts[end] && run_key(allocs[end].r) == run_key(a.r)) ++end;
      const uint64_t start_ns = us(a) * 1000 - 500;
      const uint64_t end_ns =
          end < allocs.size() ? us(allocs[end]) * 1000 - 500 : last_us * 1000 + 500;
      const uint64_t site = site_id(a.r.site);
      if (site) mark(start_ns, MarkKind::Site, site);
      switch (a.r.made) {
        case Made::Forward: {
          auto [it, fresh] = modules.try_emplace(a.r.root, modules.size() + 1);
          if (fresh) {
            const FrameText f = a.r.root_frame.value_or(FrameText{});
            text += "M\t" + std::to_string(it->second) + "\t" + field(f.name) + " (" +
                    field(f.file) + ")\t\t" + field(f.file) + "\t" + std::to_string(f.line) + "\n";
          }
          mark(start_ns, forward, it->second);
          mark(end_ns, MarkKind::ForwardEnd, it->second);
          break;
        }
        case Made::Backward:
          mark(start_ns, MarkKind::Backward, 0);
          mark(end_ns, MarkKind::BackwardEnd, 0);
          break;
        case Made::Step:
          mark(start_ns, MarkKind::Step, 1);
          mark(end_ns, MarkKind::StepEnd, 1);
          break;
        default: break;
      }
    }
  }
  // A snapshot that holds an OOM was written in the handler of the job it ended (its process's
  // end is not in it): the exception the hook would have recorded, at the last OOM, with that
  // entry's frames (innermost first), so that the OOM is the fatal one.
  for (size_t d = 0; d < devices.size(); ++d)
    for (auto it = devices[d].rbegin(); it != devices[d].rend(); ++it)
      if (it->action == "oom") {
        std::string where;
        if (it->frames != npos)
          for (Index f : u.values.items(it->frames)) {
            if (!w.is(f, Kind::Dict) || where.size() > 60000) continue;
            std::string file = field(w.text(f, "filename")), fn = field(w.text(f, "name"));
            for (std::string* x : {&file, &fn}) std::replace(x->begin(), x->end(), '|', ' ');
            where += (where.empty() ? "" : "|") + file + ":" +
                     std::to_string(std::max<int64_t>(0, w.integer(f, "line"))) + ":" + fn;
          }
        text += "X\t" + std::to_string(it->time_us * 1000 + 1) +
                "\ttorch.OutOfMemoryError\tCUDA out of memory (the snapshot ends at the "
                "allocator's OOM)\t" +
                where + "\n";
        d = devices.size() - 1;
        break;
      }
  uint64_t last_ns = kFirstNs;
  bool any_oom = false;
  for (size_t d = 0; d < devices.size(); ++d) {
    for (const Entry& x : devices[d]) {
      const std::string ids = x.frames == npos ? std::string() : frame_list(x.frames);
      any_oom |= x.action == "oom";
      // An oom entry's size is the request; its addr is cudaMemGetInfo's free bytes (PyTorch
      // writes it as device_free).
      text += "E\t" + std::to_string(d) + "\t" + field(x.action, 64) + "\t" +
              std::to_string(x.address) + "\t" + std::to_string(x.bytes) + "\t" +
              std::to_string(x.stream) + "\t" + std::to_string(x.time_us) + "\t" + ids + "\t" +
              (x.device_free ? std::to_string(*x.device_free) : std::string()) + "\n";
      last_ns = std::max(last_ns, kFirstNs + (x.time_us - t0) * 1000);
    }
  }

  // The allocator's state at the dump: what the trace did not make was live before its first
  // entry (a ring that was full, or a history recorded after the program began). Segments,
  // blocks in use (the size asked for, as the entries give it), private pools.
  std::map<uint32_t, std::vector<std::string>> state;
  std::string pools;
  uint64_t state_segments = 0, state_blocks = 0, state_reserved = 0, state_active = 0;
  if (w.is(segments, Kind::List)) {
    for (Index s : u.values.items(segments)) {
      if (!w.is(s, Kind::Dict) || !w.first_visit(s)) continue;
      const uint64_t dev = w.unsigned_of(s, "device");
      if (dev >= side::kMaxDevice) w.fail("a segment of device " + std::to_string(dev));
      uint64_t address = w.unsigned_of(s, "address");
      const uint64_t total = w.unsigned_of(s, "total_size");
      ++state_segments;
      state_reserved += total;
      auto& lines = state[static_cast<uint32_t>(dev)];
      lines.push_back("G\t" + std::to_string(dev) + "\t" + std::to_string(address) + "\t" +
                      std::to_string(total) + "\n");
      const Index pool = w.get(s, "segment_pool_id");
      if ((w.is(pool, Kind::Tuple) || w.is(pool, Kind::List)) && u.values.items(pool).size() == 2) {
        const Index a = u.values.items(pool)[0], b = u.values.items(pool)[1];
        const int64_t p0 = u.values.is_int(a) ? u.values.int_of(a) : 0;
        const int64_t p1 = u.values.is_int(b) ? u.values.int_of(b) : 0;
        if ((p0 || p1) && p0 >= 0 && p1 >= 0)
          pools += "P\t" + std::to_string(dev) + "\t" + std::to_string(address) + "\t" +
                   std::to_string(total) + "\t" + std::to_string(p0) + "\t" + std::to_string(p1) +
                   "\t" + (p1 == 0 ? "graph" : "pool") + "\n";
      }
      for (Index b : w.list(s, "blocks")) {
        if (!w.is(b, Kind::Dict) || !w.first_visit(b)) continue;
        const uint64_t size = w.unsigned_of(b, "size");
        // PyTorch gives each block its address (2.1 and later); before, the segment's
        // address plus the sizes of the blocks before it.
        const Index at = w.get(b, "address");
        const uint64_t block_at = at != npos && u.values.is_int(at) && u.values.int_of(at) >= 0
                                      ? static_cast<uint64_t>(u.values.int_of(at))
                                      : address;
        const std::string_view st = w.text(b, "state");
        if (st == "active_allocated" || st == "active_pending_free") {
          const uint64_t asked = w.unsigned_of(b, "requested_size");
          const uint64_t bytes = asked > 0 && asked <= size ? asked : size;
          ++state_blocks;
          state_active += size;
          lines.push_back("A\t" + std::to_string(dev) + "\t" + std::to_string(block_at) + "\t" +
                          std::to_string(bytes) + "\n");
        }
        address = block_at + size;
      }
    }
  }
  // A device whose trace does not account for its state: the trace frees what it never made,
  // or the state holds a segment the trace never made.
  auto before_trace = [&](uint32_t dev) {
    std::set<uint64_t> made_segments, live;
    bool freed_unmade = false;
    if (dev < devices.size())
      for (const Entry& x : devices[dev]) {
        if (x.action == "segment_alloc" || x.action == "segment_map")
          made_segments.insert(x.address);
        if (x.action == "alloc") live.insert(x.address);
        if (x.action == "free_completed") freed_unmade |= live.erase(x.address) == 0;
        if (x.action == "segment_free") freed_unmade |= made_segments.count(x.address) == 0;
      }
    if (freed_unmade) return true;
    for (const std::string& l : state[dev]) {
      if (l[0] != 'G') continue;
      uint64_t d = 0, address = 0, total = 0;
      std::sscanf(l.c_str(), "G\t%" SCNu64 "\t%" SCNu64 "\t%" SCNu64, &d, &address, &total);
      auto in = made_segments.lower_bound(address);
      if (in == made_segments.end() || *in >= address + total) return true;
    }
    return false;
  };
  std::vector<uint32_t> wrapped;
  for (const auto& [dev, lines] : state)
    if (before_trace(dev)) wrapped.push_back(dev);
  for (uint32_t dev : wrapped) {
    text += "W\t" + std::to_string(dev) + "\t" +
            std::to_string(dev < devices.size() ? devices[dev].size() : 0) + "\n";
    for (const std::string& l : state[dev]) text += l;
  }
  text += pools;
  text += "END\t" + std::to_string(entries) + "\n";

  TorchTraceReader reader(name);
  reader.feed(text);
  out.torch = reader.finish();
  out.torch.torch_version = "";
  out.torch.context.torch_version = "";
  // Blocks whose frames say no phase: unclassified (torch_memory.cpp), and why.
  {
    std::set<std::tuple<uint32_t, uint64_t, uint64_t>> unknown;
    for (const Alloc& a : allocs)
      if (a.r.made == Made::Unknown) {
        const Entry& x = devices[a.dev][a.i];
        unknown.insert(
            {static_cast<uint32_t>(a.dev), x.address, kFirstNs + (x.time_us - t0) * 1000});
      }
    for (TorchBlock& b : out.torch.context.blocks)
      b.phase_unknown = unknown.count({b.device, b.address, b.alloc_ns}) > 0;
    // Its frames are the snapshot's context: classified even where they say nothing (then
    // unclassified, and said why).
    if (!allocs.empty()) out.torch.context.present = true;
    if (!unknown.empty()) {
      const std::string n =
          std::to_string(unknown.size()) + " of its " + std::to_string(allocs.size()) + " blocks";
      out.problems.push_back(
          name + ": " + n + " are unclassified: " +
          (!any_frames ? std::string("no entry has frames (recorded with context=None), and "
                                     "the phase that made a block is read from its frames")
           : !any_native
               ? std::string("they have no frames, and the snapshot has no C++ frames "
                             "(recorded with stacks=\"python\"): the autograd engine's thread "
                             "runs no Python, so a backward's blocks are among these")
               : std::string("their frames show no Python code and no autograd engine")));
    }
  }

  // ---- what the snapshot is, and what it cannot say ----
  // Its layout by the keys it holds: PyTorch 2.1 wrote none of these four; 2.11 writes them all.
  const bool compile_context = entry_keys.count("compile_context");
  const bool user_metadata = entry_keys.count("user_metadata");
  const bool annotations = w.get(root, "external_annotations") != npos;
  std::string keys;
  for (const auto& [has, key] :
       {std::pair{has_settings, "allocator_settings"},
        std::pair{compile_context, "compile_context"}, std::pair{user_metadata, "user_metadata"},
        std::pair{annotations, "external_annotations"}})
    if (has) keys += (keys.empty() ? "" : ", ") + std::string(key);
  const int held = has_settings + compile_context + user_metadata + annotations;
  const std::string layout =
      held == 0   ? "the layout of PyTorch 2.1 (no allocator_settings, compile_context, "
                    "user_metadata, external_annotations)"
      : held == 4 ? "the layout of PyTorch 2.11 (" + keys + ")"
                  : "a layout between PyTorch 2.1's and 2.11's (" + keys + ")";
  out.description = "PyTorch memory snapshot, pickle protocol " + std::to_string(u.protocol) +
                    ", " + layout + ": " + std::to_string(entries) + " trace entries on " +
                    std::to_string(devices.size()) + " device(s), " +
                    std::to_string(state_segments) + " segments at the dump" +
                    (conf_inferred ? "; expandable_segments read from its mapped segments" : "");
  if (entries == 0)
    out.problems.push_back(name +
                           ": its history is empty (recorded with _record_memory_history "
                           "enabled=None, or not recorded): only the allocator's state at the "
                           "dump is read, with no moment");
  if (untimed)
    out.problems.push_back(name + ": " + std::to_string(untimed) +
                           " entries have no time_us: their moments are their order only");
  // A history that does not reach back to the start: the side channel's reader's problem
  // (which the commands know by its words), said for a snapshot.
  if (out.torch.problem.rfind("PyTorch's trace buffer", 0) == 0)
    out.torch.problem =
        "PyTorch's trace buffer of the snapshot does not reach back to the program's start "
        "(_record_memory_history's max_entries was reached, or it was called late): what was "
        "live before its first entry is read from the allocator's state at the dump, without "
        "its moment or frames";

  // ---- the process that stands for the snapshot's ----
  auto& s = out.process_trace;
  format::FileHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.version = format::kFormatVersion;
  h.header_bytes = sizeof h;
  s.insert(s.end(), reinterpret_cast<const uint8_t*>(&h),
           reinterpret_cast<const uint8_t*>(&h) + sizeof h);
  std::vector<uint8_t> frame;
  uint64_t last_t = 0, count = 0;
  auto put = [&](const auto& r, uint64_t t) {
    const size_t at = frame.size();
    frame.resize(at + format::max_bytes(r));
    uint8_t* end;
    if constexpr (std::decay_t<decltype(r)>::kTimed) {
      end = format::put(frame.data() + at, r, t - last_t);
      last_t = t;
    } else {
      end = format::put(frame.data() + at, r);
    }
    frame.resize(static_cast<size_t>(end - frame.data()));
    ++count;
  };
  const std::string& cmdline = out.description;
  const uint64_t start_ns = kFirstNs - 2;  // before the segments live before the first entry
  put(rec::Process{pid, 0, realtime_ns, start_ns, "", name, cmdline, ""}, 0);
  const std::string uuid(16, '\0');
  size_t ndev = std::max<size_t>(devices.size(), state.empty() ? 0 : state.rbegin()->first + 1);
  for (uint32_t d = 0; d < ndev; ++d)
    put(rec::ContextCreate{0x5a000 + d, d, 0, "a GPU of a PyTorch memory snapshot", uuid},
        start_ns);
  // The driver's side of each segment, as vramtrace records it in a run: segment_alloc and
  // segment_free are PyTorch's cudaMalloc and cudaFree; segment_map and segment_unmap (expandable
  // segments) map and unmap physical pages, a handle per 2 MiB page (both pools' pages are
  // multiples of it), so that an unmap of some of a mapping's pages frees those.
  constexpr uint64_t kPage = 2ull << 20;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> pages;  // (device, page address) -> handle
  uint64_t next_handle = 1;
  for (const TorchEvent& e : out.torch.events) {
    if (e.record.type != format::RecordType::UserSegment) continue;
    const auto& g = e.record.user_segment;
    const uint32_t dev = static_cast<uint32_t>(g.pool - kTorchPoolBase);
    const uint64_t t = std::max(e.record.time_ns, last_t);
    switch (g.op) {
      case format::SegmentOp::AddSegment:
        put(rec::Alloc{format::Api::cuMemAlloc, dev, g.address, g.bytes, 0, 0}, t);
        break;
      case format::SegmentOp::RemoveSegment:
        put(rec::Free{format::Api::cuMemFree, dev, g.address, 0, 0}, t);
        break;
      case format::SegmentOp::Map: {
        const bool paged = g.address % kPage == 0 && g.bytes % kPage == 0;
        const uint64_t step = paged ? kPage : g.bytes;
        for (uint64_t at = g.address; at < g.address + g.bytes; at += step) {
          if (pages.count({dev, at})) continue;  // mapped twice: a damaged trace
          const uint64_t handle = next_handle++;
          pages[{dev, at}] = handle;
          put(rec::VmmCreate{dev, handle, step}, t);
          put(rec::VmmMap{at, step, 0, handle}, t);
        }
        break;
      }
      case format::SegmentOp::Unmap: {
        put(rec::VmmUnmap{g.address, g.bytes}, t);
        for (auto it = pages.lower_bound({dev, g.address});
             it != pages.end() && it->first.first == dev && it->first.second < g.address + g.bytes;
             it = pages.erase(it))
          put(rec::VmmRelease{it->second}, t);
        break;
      }
    }
  }
  // A snapshot written at an OOM (in the handler of a job that died): the process's end is not
  // in it. Without one, the dump is where it is read to.
  if (!any_oom) put(rec::ProcessExit{count + 1, 0}, last_ns + 1);
  format::FrameHeader fh{};
  fh.raw_bytes = static_cast<uint32_t>(frame.size());
  fh.record_count = static_cast<uint32_t>(count);
  fh.codec = 0;
  fh.base_time_ns = 0;
  const uint32_t sum = format::frame_checksum_bytes(h.version)
                           ? format::seal_frame(fh, frame.data(), frame.size())
                           : 0;
  s.insert(s.end(), reinterpret_cast<const uint8_t*>(&fh),
           reinterpret_cast<const uint8_t*>(&fh) + sizeof fh);
  s.insert(s.end(), frame.begin(), frame.end());
  if (format::frame_checksum_bytes(h.version))
    s.insert(s.end(), reinterpret_cast<const uint8_t*>(&sum),
             reinterpret_cast<const uint8_t*>(&sum) + sizeof sum);
  return out;
}

TorchSnapshot read_torch_snapshot(const std::string& path, uint64_t pid) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw TraceError(path + ": cannot be read");
  return torch_snapshot_of(bytes, path, pid);
}

}  // namespace vramtrace::collector

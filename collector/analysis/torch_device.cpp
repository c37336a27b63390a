// PyTorch's memory on one device of a process, as the report shows it (see torch_device.h).
#include "collector/analysis/torch_device.h"

#include "collector/analysis/stacks.h"

#include <algorithm>
#include <set>

#include "collector/analysis/categories.h"

namespace vramtrace::collector {

namespace {

// The blocks live at `t` whose holder is known there: inside a gap of the trace
// (--torch=sampled) only those known_in_gap() keeps (parameters, optimizer state); a block of
// any other kind live at both of the gap's ends may have been freed and made again in it, so
// the lists of the peak leave it out, as its category counts it unclassified.
std::vector<size_t> known_live_at(const TorchMemory& tm, uint32_t dev, uint64_t t) {
  std::vector<size_t> live = tm.live_at(dev, t);
  if (gap_at(tm.context(), dev, t))
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](size_t i) { return !known_in_gap(tm.info()[i].category); }),
               live.end());
  return live;
}

// Over time: at the lowest and the highest moment of each bucket of the device's timeline, in
// time order (every rise and fall wider than a bucket, the exact peak), and at the end: the
// blocks by category, the cache and the memory outside PyTorch's allocator (the driver's
// figure less what the allocator held).
// PyTorch's blocks rise and fall inside segments the driver sees once: the moments are the
// extremes of both the driver's timeline and the blocks in use (bucketed the same way).
// Between two of the driver's moments its figure is the earlier one's.
void category_series(const TorchMemory& tm, const DeviceModel& d, uint64_t end_ns,
                     TorchDevice& out) {
  const uint32_t dev = d.index;
  std::vector<std::pair<uint64_t, int64_t>> block_events;
  for (const auto& blk : tm.context().blocks) {
    if (blk.device != dev) continue;
    block_events.push_back({blk.alloc_ns, static_cast<int64_t>(blk.bytes)});
    if (blk.free_ns != UINT64_MAX)
      block_events.push_back({blk.free_ns, -static_cast<int64_t>(blk.bytes)});
  }
  std::stable_sort(block_events.begin(), block_events.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Timeline in_use(1024);  // two moments per bucket: about a chart's pixels
  int64_t held = 0;
  for (const auto& [t, delta] : block_events) {
    held += delta;
    in_use.add(t, static_cast<uint64_t>(std::max<int64_t>(0, held)));
  }
  std::map<uint64_t, std::optional<uint64_t>> moments;  // time -> the driver's figure then
  std::set<uint64_t> rises;  // the driver's highs: moments right after a driver allocation
  const auto extremes = [&](const Timeline& tl, bool driver) {
    for (const auto& pt : tl.points()) {
      for (auto [t, b] : {std::pair{pt.min_ns, pt.min_bytes}, std::pair{pt.max_ns, pt.max_bytes}}) {
        auto& slot = moments[t];
        if (driver) slot = b;
      }
      if (driver) rises.insert(pt.max_ns);
    }
  };
  const auto& pts = d.memory.timeline.points();
  extremes(d.memory.timeline, true);
  extremes(in_use, false);
  if (!pts.empty() && (moments.empty() || end_ns > moments.rbegin()->first))
    moments[end_ns] = pts.back().last_bytes;
  // Each gap of the trace (--torch=sampled) starts and ends a stretch drawn as not known.
  for (const TorchGap& g : tm.context().gaps)
    if (g.device == dev && g.end_ns <= end_ns) {
      moments.try_emplace(g.start_ns);
      moments.try_emplace(g.end_ns);
    }
  std::vector<uint64_t>& times = out.times;
  std::vector<uint64_t> drivers;
  uint64_t driver_now = 0;
  for (const auto& [t, b] : moments) {
    if (b) driver_now = *b;
    if (t < out.window_start) continue;  // before the ring's window: PyTorch's side unknown
    times.push_back(t);
    drivers.push_back(driver_now);
  }
  // A high of the driver's is the moment a segment came, before the allocator recorded it
  // and the block it was made for (microseconds later): read the allocator just after that
  // block (as at the peak), or the new segment would be drawn as memory outside PyTorch.
  // Its record comes before the driver's next change, however long the program took between
  // (the first call of a process can take milliseconds): events, not a time window.
  std::vector<uint64_t> changes;
  for (const auto& pt : pts)
    for (uint64_t t : {pt.min_ns, pt.max_ns}) changes.push_back(t);
  std::sort(changes.begin(), changes.end());
  std::vector<uint64_t> read_at(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    // While PyTorch's trace was off (--torch=sampled) the block made there is not known: the
    // moment itself is read, its unknown part unclassified.
    if (!rises.count(times[i]) || gap_at(tm.context(), dev, times[i])) {
      read_at[i] = times[i];
      continue;
    }
    auto next = std::upper_bound(changes.begin(), changes.end(), times[i]);
    read_at[i] = tm.after_segment(dev, 0, times[i], next == changes.end() ? UINT64_MAX : *next);
  }
  if (!times.empty() && times.back() == end_ns) read_at.back() = end_ns;
  std::vector<size_t> order(times.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return read_at[a] < read_at[b]; });
  std::vector<uint64_t> sorted_reads;
  for (size_t i : order) sorted_reads.push_back(read_at[i]);
  const std::vector<CategoryBytes> sorted_series = tm.series(dev, sorted_reads);
  out.series.assign(times.size(), CategoryBytes{});
  for (size_t k = 0; k < order.size(); ++k) out.series[order[k]] = sorted_series[k];
  constexpr size_t kCache = static_cast<size_t>(Category::AllocatorCache);
  for (size_t i = 0; i < times.size(); ++i) {
    CategoryBytes& c = out.series[i];
    const uint64_t driver = drivers[i];
    if (gap_at(tm.context(), dev, times[i])) {
      // While the trace was off (--torch=sampled), as categorize() has it: what known_in_gap()
      // says, the rest unclassified.
      CategoryBytes known{};
      uint64_t sum = 0;
      for (size_t k = 0; k < kCategories; ++k)
        if (known_in_gap(static_cast<Category>(k))) {
          known[k] = c[k];
          sum += c[k];
        }
      known[static_cast<size_t>(Category::Unclassified)] = driver - std::min(driver, sum);
      c = known;
      continue;
    }
    uint64_t blocks = 0;
    for (size_t k = 0; k < kCategories; ++k)
      if (k != kCache) blocks += c[k];
    uint64_t reserved = std::min(std::max(c[kCache], blocks), driver);
    c[kCache] = reserved - std::min(reserved, blocks);
    c[static_cast<size_t>(Category::OutsidePytorch)] = driver - reserved;
  }
}

// By module at the peak (activations and temporaries), with totals per top-level module.
void modules_at_peak(const TorchMemory& tm, uint32_t dev, uint64_t peak_t, TorchDevice& out) {
  // Each module's blocks by the line of the program that ran it (the phase's call) and by
  // category, and where the module is defined: what the page expands a module to.
  struct ModuleDetail {
    uint32_t id = 0;
    uint64_t count = 0;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> sites;  // site id -> bytes, blocks
    CategoryMap categories;
  };
  // Inside a gap of the trace no activation's module is known (known_live_at).
  if (gap_at(tm.context(), dev, peak_t)) return;
  std::map<std::string, ModuleDetail> details;
  for (size_t i : tm.live_at(dev, peak_t)) {
    const auto& b = tm.info()[i];
    if (!b.module || (b.category != Category::Activations && b.category != Category::Temporaries))
      continue;
    ModuleDetail& m = details[tm.module_name(b.module)];
    const uint64_t n = tm.context().blocks[i].bytes;
    m.id = b.module;
    ++m.count;
    auto& site = m.sites[b.site];
    site.first += n;
    ++site.second;
    m.categories[b.category] += n;
  }
  std::map<std::string, std::pair<uint64_t, uint32_t>> top;  // bytes, first call
  for (const auto& [name, bytes, first_call] : live_by_module(tm, dev, peak_t, false)) {
    if (out.by_module.size() < kTopModules) {
      ModuleAtPeak mod;
      mod.module = name;
      mod.bytes = bytes;
      auto it = details.find(name);
      if (it != details.end() && it->second.id <= tm.context().modules.size()) {
        const ModuleDetail& m = it->second;
        const auto& tmod = tm.context().modules[m.id - 1];
        mod.detailed = true;
        mod.count = m.count;
        mod.type = tmod.type;
        if (!tmod.file.empty()) mod.forward_at = tmod.file + ":" + std::to_string(tmod.line);
        mod.categories = m.categories;
        for (const auto& [site, bc] : m.sites) {
          ModuleAtPeak::Line line{"(line unknown)", bc.first, bc.second};
          if (site && site <= tm.context().sites.size()) {
            const auto& ts = tm.context().sites[site - 1];
            line.site = ts.function + " (" + ts.file + ":" + std::to_string(ts.line) + ")";
          }
          mod.sites.push_back(std::move(line));
        }
        std::stable_sort(mod.sites.begin(), mod.sites.end(),
                         [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
      }
      out.by_module.push_back(std::move(mod));
    }
    auto [at, added] = top.try_emplace(name.substr(0, name.find('.')), 0, first_call);
    at->second.first += bytes;
    at->second.second = std::min(at->second.second, first_call);
  }
  // Largest first; top-level modules of equal bytes in the model's order.
  std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> tops(top.begin(), top.end());
  std::sort(tops.begin(), tops.end(), [](const auto& a, const auto& b) {
    return a.second.first != b.second.first ? a.second.first > b.second.first
                                            : a.second.second < b.second.second;
  });
  for (const auto& [name, bytes_order] : tops)
    out.by_top_module.emplace_back(name, bytes_order.first);
}

// Named tensors live at the peak: parameters, gradients, optimizer state, largest first.
void named_tensors_at_peak(const TorchMemory& tm, uint32_t dev, uint64_t peak_t, TorchDevice& out) {
  std::vector<NamedTensorAtPeak> named;
  for (size_t i : known_live_at(tm, dev, peak_t)) {
    const auto& b = tm.info()[i];
    if (b.label < 0) continue;
    named.push_back({&tm.context().labels[static_cast<size_t>(b.label)], b.category,
                     tm.context().blocks[i].bytes});
  }
  std::stable_sort(named.begin(), named.end(),
                   [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  out.named_tensors = named.size();
  if (named.size() > kTopTensors) named.resize(kTopTensors);
  out.tensors = std::move(named);
}

// PyTorch's blocks live at the peak by the user's Python line, with their categories, and the
// largest blocks themselves.
void lines_and_blocks_at_peak(const TorchMemory& tm, uint32_t dev, uint64_t peak_t,
                              TorchDevice& out) {
  struct Line {
    uint64_t bytes = 0, count = 0;
    CategoryMap categories;
    std::map<std::string, uint64_t> modules;
  };
  std::map<std::string, Line> lines;
  std::vector<size_t> live = known_live_at(tm, dev, peak_t);
  for (size_t i : live) {
    const auto& b = tm.info()[i];
    const uint64_t n = tm.context().blocks[i].bytes;
    std::string site = tm.site_text(b.site);
    Line& l = lines[site.empty() ? "(line unknown)" : site];
    l.bytes += n;
    ++l.count;
    l.categories[b.category] += n;
    if (b.module) l.modules[tm.module_name(b.module)] += n;
  }
  std::vector<std::pair<std::string, const Line*>> order;
  for (const auto& [site, l] : lines) order.push_back({site, &l});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  for (size_t k = 0; k < order.size() && k < kTopLines; ++k) {
    const Line& l = *order[k].second;
    LineAtPeak line{order[k].first, l.bytes, l.count, l.categories, std::nullopt};
    // The module that holds most of it: which layer a line's forward kept.
    auto top = std::max_element(l.modules.begin(), l.modules.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    if (top != l.modules.end()) line.module = top->first;
    out.by_line.push_back(std::move(line));
  }

  std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) {
    return tm.context().blocks[a].bytes > tm.context().blocks[b].bytes;
  });
  for (size_t k = 0; k < live.size() && k < kTopBlocks; ++k) {
    const size_t i = live[k];
    const auto& b = tm.info()[i];
    const auto& blk = tm.context().blocks[i];
    BlockAtPeak block;
    block.bytes = blk.bytes;
    block.address = blk.address;
    block.category = b.category;
    block.what = tm.describe(b);
    if (b.module) block.module = tm.module_name(b.module);
    if (std::string site = tm.site_text(b.site); !site.empty()) block.site = site;
    if (b.label >= 0) block.name = tm.context().labels[static_cast<size_t>(b.label)].name;
    if (b.phase != TorchPhase::None) block.phase = b.phase;
    if (b.iteration >= 0) block.iteration = b.iteration;
    out.blocks.push_back(std::move(block));
  }
}

}  // namespace

std::optional<TorchDevice> torch_device(const ProcessModel& p, const DeviceModel& d,
                                        uint64_t timeline_end_ns, StackResolver& stacks) {
  const TorchMemory* tm = p.torch_memory.get();
  if (!tm) return std::nullopt;
  const uint32_t dev = d.index;
  TorchDevice out;
  // JAX: the driver sees XLA's pool as one allocation; what it held comes from XLA itself.
  if (auto x = tm->context().xla.find(dev); x != tm->context().xla.end()) out.xla = &x->second;
  if (tm->context().blocks.empty()) return out;  // no PyTorch blocks to classify
  out.classified = true;
  out.peak_moment = peak_moment_of(*tm, d);
  const uint64_t peak_t = out.peak_moment.time_ns;
  out.at_peak = categories_at_peak(*tm, d, out.peak_moment, &stacks);
  std::vector<Allocation> still;
  for (const auto& [k, a] : p.live)
    if (a.device == dev) still.push_back(a);
  out.at_exit = categorize(*tm, dev, p.end_ns, d.memory.live_bytes(), still, &stacks);
  // The private pools at the dump (CUDA graphs' capture pools, torch.cuda.MemPool): their
  // segments count whole in their category, from the moment each was made.
  out.private_pools = tm->private_pools(dev);
  // A run longer than PyTorch's ring: the blocks made before its earliest entry are known
  // from the allocator's state at the end, but not when or by what they were made.
  const auto window = tm->context().window_start.find(dev);
  out.window_start = window == tm->context().window_start.end() ? 0 : window->second;
  category_series(*tm, d, timeline_end_ns, out);
  modules_at_peak(*tm, dev, peak_t, out);
  named_tensors_at_peak(*tm, dev, peak_t, out);
  lines_and_blocks_at_peak(*tm, dev, peak_t, out);
  return out;
}

std::optional<TorchOom> torch_oom(const ProcessModel& p, const OomEvent& o, StackResolver& stacks) {
  const TorchMemory* tm = p.torch_memory.get();
  if (!tm) return std::nullopt;
  TorchOom out;
  // The phase, module and iteration running when it failed.
  const PhaseSpan* in = tm->phase_at(o.time_ns);
  out.phase = in ? phase_key(in->phase) : "other";
  out.iteration = tm->iteration_at(o.time_ns);
  if (const uint32_t module = tm->module_at(o.time_ns)) out.module = tm->module_name(module);
  if (in && in->site) out.python_site = tm->site_text(in->site);
  // The fatal OOM's own line: the user's innermost frame of the exception that reached the top.
  const auto& x = tm->context().exception;
  if (o.fatal && x) {
    for (const auto& f : x->frames)
      if (!is_framework_file(f.file)) {
        out.python_site = f.file + ":" + std::to_string(f.line);
        out.python_function = f.function;
        break;
      }
    out.exception = &*x;
  }
  out.categories = categories_at_oom(*tm, o, &stacks);
  return out;
}

}  // namespace vramtrace::collector

// report.json's view of what the memory is (categories over time, modules, named tensors,
// phases), of each OOM's moment (phase, module, iteration, the user's line) and the run's
// diagnosis (verdict, effective limit, cause, remedies): rendered from collector/torch_memory.h
// and collector/diagnosis.h, which do the analysis.
#include "report/torch_json.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "collector/diagnosis.h"
#include "collector/retention.h"
#include "collector/whatif.h"
#include "report/json_report.h"

namespace vramtrace::report {

using collector::Category;
using collector::CategoryBytes;
using collector::TorchMemory;
using nlohmann::json;

namespace {

json bytes_json(const CategoryBytes& c) {
  json j = json::object();
  for (size_t i = 0; i < collector::kCategories; ++i)
    j[collector::category_key(static_cast<Category>(i))] = c[i];
  return j;
}

// PyTorch's blocks live at the peak by the user's Python line (the phase's call, or the line
// that moved a tensor to the GPU) with their categories, and the largest blocks themselves:
// what `check`, `diff` and the page name instead of the allocator's segments, whose sites are
// the line that happened to make a segment, or a frame inside the caching allocator.
void add_torch_peak_lines(json& peak, const TorchMemory& tm, uint32_t dev, uint64_t peak_t) {
  struct Line {
    uint64_t bytes = 0, count = 0;
    std::map<std::string, uint64_t> categories, modules;
  };
  std::map<std::string, Line> lines;
  std::vector<size_t> live = tm.live_at(dev, peak_t);
  for (size_t i : live) {
    const auto& b = tm.info()[i];
    const uint64_t n = tm.context().blocks[i].bytes;
    std::string site = tm.site_text(b.site);
    Line& l = lines[site.empty() ? "(line unknown)" : site];
    l.bytes += n;
    ++l.count;
    l.categories[category_key(b.category)] += n;
    if (b.module) l.modules[tm.module_name(b.module)] += n;
  }
  std::vector<std::pair<std::string, const Line*>> order;
  for (const auto& [site, l] : lines) order.push_back({site, &l});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  json by_line = json::array();
  for (size_t k = 0; k < order.size() && k < 200; ++k) {
    const Line& l = *order[k].second;
    json j = {{"site", order[k].first},
              {"bytes", l.bytes},
              {"count", l.count},
              {"categories", l.categories}};
    // The module that holds most of it: which layer a line's forward kept.
    auto top = std::max_element(l.modules.begin(), l.modules.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    if (top != l.modules.end()) j["module"] = top->first;
    by_line.push_back(j);
  }
  peak["by_line"] = by_line;

  std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) {
    return tm.context().blocks[a].bytes > tm.context().blocks[b].bytes;
  });
  json blocks = json::array();
  for (size_t k = 0; k < live.size() && k < 50; ++k) {
    const size_t i = live[k];
    const auto& b = tm.info()[i];
    const auto& blk = tm.context().blocks[i];
    json j = {{"bytes", blk.bytes},
              {"address", blk.address},
              {"category", category_key(b.category)},
              {"what", tm.describe(b)}};
    if (b.module) j["module"] = tm.module_name(b.module);
    if (std::string site = tm.site_text(b.site); !site.empty()) j["site"] = site;
    if (b.label >= 0) j["name"] = tm.context().labels[static_cast<size_t>(b.label)].name;
    if (b.phase != collector::TorchPhase::None) j["phase"] = collector::phase_key(b.phase);
    if (b.iteration >= 0) j["iteration"] = b.iteration;
    blocks.push_back(j);
  }
  peak["blocks"] = blocks;
}

}  // namespace

json categories_order() {
  json order = json::array(), titles = json::object();
  for (size_t i = 0; i < collector::kCategories; ++i)
    order.push_back(category_key(static_cast<Category>(i)));
  return order;
}

void add_torch_device(json& dj, const collector::ProcessModel& p, const collector::DeviceModel& d,
                      collector::StackResolver& stacks, uint64_t origin) {
  const TorchMemory* tm = p.torch_memory.get();
  if (!tm) return;
  const uint32_t dev = d.index;
  // JAX: the driver sees XLA's pool as one allocation; what it held comes from XLA itself.
  if (auto x = tm->context().xla.find(dev); x != tm->context().xla.end()) {
    dj["xla_pool"] = {{"in_use_at_exit_bytes", x->second.in_use},
                      {"peak_in_use_bytes", x->second.peak_in_use},
                      {"limit_bytes", x->second.limit},
                      {"reserved_bytes", x->second.reserved},
                      {"largest_allocation_bytes", x->second.largest_alloc},
                      {"note",
                       "XLA's own allocator (JAX's memory_stats() at exit): the pool it "
                       "took from the driver is the device figure; its peak in use is "
                       "what the program's arrays needed"}};
  }
  if (tm->context().blocks.empty()) return;  // no PyTorch blocks to classify
  const collector::PeakMoment pm = collector::peak_moment_of(*tm, d);
  const uint64_t peak_t = pm.time_ns;
  CategoryBytes at_peak = collector::categories_at_peak(*tm, d, pm, &stacks);
  std::vector<collector::Allocation> still;
  for (const auto& [k, a] : p.live)
    if (a.device == dev) still.push_back(a);
  CategoryBytes at_exit =
      collector::categorize(*tm, dev, p.end_ns, d.memory.live_bytes(), still, &stacks);
  json titles = json::object();
  for (size_t i = 0; i < collector::kCategories; ++i)
    titles[category_key(static_cast<Category>(i))] = category_title(static_cast<Category>(i));
  json cat = {{"order", categories_order()},
              {"titles", titles},
              {"at_peak", bytes_json(at_peak)},
              {"at_peak_moment",
               {{"what", pm.moment},
                {"time_ns", peak_t >= origin ? peak_t - origin : 0},
                {"bytes", pm.device_bytes}}},
              {"at_exit", bytes_json(at_exit)},
              {"note",
               "PyTorch's blocks by what they hold (the start-up hook's module, autograd "
               "and optimizer hooks); a private pool's segments (CUDA graphs', "
               "torch.cuda.MemPool) count whole as CUDA-graph / private pools; the "
               "allocator's cache is its other segments less their blocks; the rest "
               "of the process's device memory is split by the library that allocated "
               "it. The categories add up to the device figure."}};
  // The private pools at the dump (CUDA graphs' capture pools, torch.cuda.MemPool): their
  // segments count whole in their category, from the moment each was made.
  if (const auto pools = tm->private_pools(dev); !pools.empty()) {
    json list = json::array();
    for (const collector::PrivatePool& pool : pools)
      list.push_back({{"pool_id", {pool.pool_id[0], pool.pool_id[1]}},
                      {"cuda_graph", pool.cuda_graph},
                      {"segments", pool.segments},
                      {"bytes", pool.bytes},
                      {"in_use_bytes", pool.in_use_bytes}});
    cat["private_pools"] = list;
  }
  // A run longer than PyTorch's ring: the blocks made before its earliest entry are known
  // from the allocator's state at the end, but not when or by what they were made.
  const auto window = tm->context().window_start.find(dev);
  const uint64_t window_start = window == tm->context().window_start.end() ? 0 : window->second;
  if (window_start)
    cat["note"] = cat["note"].get<std::string>() +
                  " PyTorch's trace held only the latest entries (from " +
                  std::to_string((window_start >= origin ? window_start - origin : 0) / 1000000) +
                  " ms on; VRAMTRACE_TORCH_MAX_ENTRIES raises its size): the blocks made "
                  "before them are unclassified unless named (parameters, gradients, optimizer "
                  "state), and the categories over time begin there.";
  // Over time: at the lowest and the highest moment of each bucket of the device's timeline,
  // in time order (every rise and fall wider than a bucket, the exact peak), and at the end:
  // the blocks by category, the cache and the memory outside PyTorch's allocator (the
  // driver's figure less what the allocator held).
  // PyTorch's blocks rise and fall inside segments the driver sees once: the moments are the
  // extremes of both the driver's timeline and the blocks in use (bucketed the same way).
  // Between two of the driver's moments its figure is the earlier one's.
  std::vector<std::pair<uint64_t, int64_t>> block_events;
  for (const auto& blk : tm->context().blocks) {
    if (blk.device != dev) continue;
    block_events.push_back({blk.alloc_ns, static_cast<int64_t>(blk.bytes)});
    if (blk.free_ns != UINT64_MAX)
      block_events.push_back({blk.free_ns, -static_cast<int64_t>(blk.bytes)});
  }
  std::stable_sort(block_events.begin(), block_events.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  collector::Timeline in_use(1024);  // two moments per bucket: about a chart's pixels
  int64_t held = 0;
  for (const auto& [t, delta] : block_events) {
    held += delta;
    in_use.add(t, static_cast<uint64_t>(std::max<int64_t>(0, held)));
  }
  std::map<uint64_t, std::optional<uint64_t>> moments;  // time -> the driver's figure then
  std::set<uint64_t> rises;  // the driver's highs: moments right after a driver allocation
  const auto extremes = [&](const collector::Timeline& tl, bool driver) {
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
  if (!pts.empty() && (moments.empty() || p.end_ns > moments.rbegin()->first))
    moments[p.end_ns] = pts.back().last_bytes;
  std::vector<uint64_t> times, drivers;
  uint64_t driver_now = 0;
  for (const auto& [t, b] : moments) {
    if (b) driver_now = *b;
    if (t < window_start) continue;  // before the ring's window: PyTorch's side unknown
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
    if (!rises.count(times[i])) {
      read_at[i] = times[i];
      continue;
    }
    auto next = std::upper_bound(changes.begin(), changes.end(), times[i]);
    read_at[i] = tm->after_segment(dev, 0, times[i], next == changes.end() ? UINT64_MAX : *next);
  }
  if (!times.empty() && times.back() == p.end_ns) read_at.back() = p.end_ns;
  std::vector<size_t> order(times.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return read_at[a] < read_at[b]; });
  std::vector<uint64_t> sorted_reads;
  for (size_t i : order) sorted_reads.push_back(read_at[i]);
  const std::vector<CategoryBytes> sorted_series = tm->series(dev, sorted_reads);
  std::vector<CategoryBytes> series(times.size());
  for (size_t k = 0; k < order.size(); ++k) series[order[k]] = sorted_series[k];
  json columns = json::array({"time_ns"});
  for (size_t i = 0; i < collector::kCategories; ++i)
    columns.push_back(category_key(static_cast<Category>(i)));
  json points = json::array();
  for (size_t i = 0; i < times.size(); ++i) {
    CategoryBytes c = series[i];
    const uint64_t driver = drivers[i];
    uint64_t blocks = 0;
    for (size_t k = 0; k < collector::kCategories; ++k)
      if (k != static_cast<size_t>(Category::AllocatorCache)) blocks += c[k];
    uint64_t reserved =
        std::min(std::max(c[static_cast<size_t>(Category::AllocatorCache)], blocks), driver);
    c[static_cast<size_t>(Category::AllocatorCache)] = reserved - std::min(reserved, blocks);
    c[static_cast<size_t>(Category::OutsidePytorch)] = driver - reserved;
    json row = json::array({times[i] >= origin ? times[i] - origin : 0});
    for (uint64_t v : c) row.push_back(v);
    points.push_back(row);
  }
  cat["timeline"] = {{"columns", columns}, {"points", points}};
  dj["categories"] = cat;

  // By module at the peak (activations and temporaries), with totals per top-level module.
  json mods = json::array();
  std::map<std::string, uint64_t> top;
  // Each module's blocks by the line of the program that ran it (the phase's call) and by
  // category, and where the module is defined: what the page expands a module to.
  struct ModuleDetail {
    uint32_t id = 0;
    uint64_t count = 0;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> sites;  // site id -> bytes, blocks
    std::map<std::string, uint64_t> categories;
  };
  std::map<std::string, ModuleDetail> details;
  for (size_t i : tm->live_at(dev, peak_t)) {
    const auto& b = tm->info()[i];
    if (!b.module || (b.category != Category::Activations && b.category != Category::Temporaries))
      continue;
    ModuleDetail& m = details[tm->module_name(b.module)];
    const uint64_t n = tm->context().blocks[i].bytes;
    m.id = b.module;
    ++m.count;
    auto& site = m.sites[b.site];
    site.first += n;
    ++site.second;
    m.categories[category_key(b.category)] += n;
  }
  for (const auto& [name, bytes] : collector::live_by_module(*tm, dev, peak_t, false)) {
    if (mods.size() < 200) {
      json mj = {{"module", name}, {"bytes", bytes}};
      auto it = details.find(name);
      if (it != details.end() && it->second.id <= tm->context().modules.size()) {
        const ModuleDetail& m = it->second;
        const auto& tmod = tm->context().modules[m.id - 1];
        mj["count"] = m.count;
        mj["type"] = tmod.type;
        if (!tmod.file.empty()) mj["forward_at"] = tmod.file + ":" + std::to_string(tmod.line);
        mj["categories"] = m.categories;
        json sites = json::array();
        for (const auto& [site, bc] : m.sites) {
          json sj = {{"bytes", bc.first}, {"count", bc.second}};
          if (site && site <= tm->context().sites.size()) {
            const auto& ts = tm->context().sites[site - 1];
            sj["site"] = ts.function + " (" + ts.file + ":" + std::to_string(ts.line) + ")";
          } else {
            sj["site"] = "(line unknown)";
          }
          sites.push_back(sj);
        }
        std::stable_sort(sites.begin(), sites.end(), [](const json& a, const json& b) {
          return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
        });
        mj["sites"] = sites;
      }
      mods.push_back(mj);
    }
    top[name.substr(0, name.find('.'))] += bytes;
  }
  dj["peak"]["by_module"] = mods;
  json tops = json::array();
  for (auto& [name, bytes] : top) tops.push_back({{"module", name}, {"bytes", bytes}});
  std::stable_sort(tops.begin(), tops.end(), [](const json& a, const json& b) {
    return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
  });
  dj["peak"]["by_top_module"] = tops;

  // Named tensors live at the peak: parameters, gradients, optimizer state, largest first.
  std::vector<std::pair<uint64_t, json>> named;
  for (size_t i : tm->live_at(dev, peak_t)) {
    const auto& b = tm->info()[i];
    if (b.label < 0) continue;
    const auto& l = tm->context().labels[static_cast<size_t>(b.label)];
    named.push_back({tm->context().blocks[i].bytes,
                     {{"name", l.name},
                      {"kind", l.kind},
                      {"category", category_key(b.category)},
                      {"bytes", tm->context().blocks[i].bytes},
                      {"shape", l.shape},
                      {"dtype", l.dtype}}});
  }
  std::stable_sort(named.begin(), named.end(), [](auto& a, auto& b) { return a.first > b.first; });
  json tensors = json::array();
  for (size_t i = 0; i < named.size() && i < 100; ++i) tensors.push_back(named[i].second);
  dj["peak"]["tensors"] = tensors;
  dj["peak"]["named_tensors"] = named.size();
  add_torch_peak_lines(dj["peak"], *tm, dev, peak_t);

  // Phases as bands (capped) and the iteration source.
  json phases = json::array();
  for (const auto& ph : tm->phases()) {
    if (phases.size() >= 4000) break;
    json j = {{"phase", collector::phase_key(ph.phase)},
              {"iteration", ph.iteration},
              {"start_ns", ph.start_ns >= origin ? ph.start_ns - origin : 0}};
    if (ph.end_ns != UINT64_MAX) j["end_ns"] = ph.end_ns >= origin ? ph.end_ns - origin : 0;
    if (ph.site) j["site"] = tm->site_text(ph.site);
    phases.push_back(j);
  }
  dj["phases"] = phases;
}

void add_torch_oom(json& oj, const collector::ProcessModel& p, const collector::OomEvent& o,
                   collector::StackResolver& stacks) {
  if (o.fatal) oj["fatal"] = true;
  const TorchMemory* tm = p.torch_memory.get();
  if (!tm) return;
  // The phase, module and iteration running when it failed.
  const collector::PhaseSpan* in = tm->phase_at(o.time_ns);
  oj["phase"] = in ? collector::phase_key(in->phase) : "other";
  oj["iteration"] = tm->iteration_at(o.time_ns);
  if (const uint32_t module = tm->module_at(o.time_ns)) oj["module"] = tm->module_name(module);
  if (in && in->site) oj["python_site"] = tm->site_text(in->site);
  // The fatal OOM's own line: the user's innermost frame of the exception that reached the top.
  const auto& x = tm->context().exception;
  if (o.fatal && x) {
    for (const auto& f : x->frames)
      if (f.file.find("/torch/") == std::string::npos &&
          f.file.find("/site-packages/") == std::string::npos &&
          f.file.find("/dist-packages/") == std::string::npos) {
        oj["python_site"] = f.file + ":" + std::to_string(f.line);
        oj["python_function"] = f.function;
        break;
      }
    oj["exception"] = {{"type", x->type}, {"message", x->message}};
  }
  oj["categories"] = bytes_json(collector::categories_at_oom(*tm, o, &stacks));
}

void lift_single_process(json& report) {
  for (json& dj : report["devices"]) {
    const json* only = nullptr;
    int with = 0, procs = 0;
    for (const json& pj : report["processes"]) {
      if (pj.value("host", "") != dj.value("host", "")) continue;
      for (const json& pd : pj["devices"])
        if (pd["index"] == dj["index"]) {
          ++procs;
          if (pd.contains("categories") || pd.contains("xla_pool")) {
            ++with;
            only = &pd;
          }
        }
    }
    if (with != 1 || procs != 1) continue;
    for (const char* k : {"categories", "phases", "xla_pool"})
      if (only->contains(k)) dj[k] = (*only)[k];
    for (const char* k :
         {"by_module", "by_top_module", "tensors", "named_tensors", "by_line", "blocks"})
      if ((*only)["peak"].contains(k)) dj["peak"][k] = (*only)["peak"][k];
  }
}

// A remedy as report.json has it: the peak it leads to (the moment's `base` less its saving,
// unless it knows better), and, where the allocator's model can apply it, its replay.
static json remedy_json(const collector::Remedy& r, uint64_t base,
                        const collector::ProcessModel& proc, uint32_t device) {
  json j = {{"kind", r.kind},
            {"title", r.title},
            {"saves_bytes", r.saves_bytes},
            {"assumption", r.assumption},
            {"how", r.how}};
  j["predicted_peak_bytes"] =
      r.predicted_peak ? *r.predicted_peak : base - std::min(base, r.saves_bytes);
  if (r.lower_bound) j["predicted_peak_is_lower_bound"] = true;
  if (r.upper_bound) j["predicted_peak_is_upper_bound"] = true;
  if (r.predicted_peak_high) j["predicted_peak_high_bytes"] = *r.predicted_peak_high;
  // Where the allocator's model can apply the remedy, its replay of the recorded requests.
  if (const auto w = collector::replay_remedy(proc, device, r.kind)) {
    json rj = {{"verdict", w->fits() ? "fits" : "oom"},
               {"reserved_peak_bytes", w->reserved_peak_bytes},
               {"limit_bytes",
                w->fraction_limit ? std::min(w->limit_bytes, *w->fraction_limit) : w->limit_bytes},
               {"up_to_recorded_oom", w->truncated_at_recorded_oom}};
    if (w->oom) {
      rj["oom"] = {{"requested_bytes", w->oom->requested_bytes},
                   {"iteration", w->oom->iteration},
                   {"module", w->oom->module},
                   {"phase", w->oom->phase}};
    }
    j["replayed"] = rj;
  }
  if (r.leaves_growth) j["leaves_growth"] = true;
  return j;
}

// The diagnosis' growth, cause and remedies in CUDA's terms, for a program whose memory PyTorch's
// allocator trace does not explain (a native program; with `remedies_too` false, PyTorch without
// its trace, whose remedies come from its categories).
static void native_diagnosis(json& dg, const json* growth, const json* fatal, uint64_t held,
                             uint64_t request, uint64_t limit, uint64_t peak,
                             const collector::ProcessModel& proc, uint32_t device,
                             bool remedies_too) {
  // A native program (or PyTorch without its allocator trace): remedies in CUDA's terms.
  collector::NativeRemedyInput nin;
  if (growth) {
    nin.growth_site = (*growth)["site"].get<std::string>();
    nin.grown_bytes = (*growth)["bytes"].get<uint64_t>();
    nin.bytes_per_iteration = (*growth)["bytes_per_iteration"].get<uint64_t>();
    if (!dg.contains("cause"))
      dg["cause"] = {
          {"kind", "growth"},
          {"title", "Live memory grows by " + human_bytes(nin.bytes_per_iteration) +
                        " per iteration, kept at " + nin.growth_site},
          {"evidence",
           json::array({{{"label", "growth per iteration"}, {"bytes", nin.bytes_per_iteration}},
                        {{"label", "grown in all"}, {"bytes", nin.grown_bytes}}})}};
    dg["growth"] = {{"kind", "growth"},
                    {"bytes_per_iteration", nin.bytes_per_iteration},
                    {"kept_bytes", nin.grown_bytes}};
  }
  nin.peak = peak;
  if (fatal) {
    nin.needed = held + request;
    nin.limit = limit;
    for (const json& f : (*fatal)["findings"])
      if (f["kind"] == "fragmentation") nin.fragmented = true;
  }
  if (remedies_too && (growth || fatal)) {
    json remedies = json::array();
    const uint64_t base = fatal ? held + request : peak;
    for (const auto& r : collector::native_remedies(nin))
      remedies.push_back(remedy_json(r, base, proc, device));
    dg["remedies"] = remedies;
  }
}

json diagnosis_json(const json& report, const collector::Run& run, collector::Symbolizer& symbols) {
  // The moment: the first fatal OOM, else the device whose peak came closest to its limit.
  const json* fatal = nullptr;
  uint64_t recovered = 0, fatal_n = 0;
  for (const json& o : report["oom"]) {
    if (o.value("fatal", false)) {
      ++fatal_n;
      if (!fatal) fatal = &o;
    } else {
      ++recovered;
    }
  }
  const collector::ProcessModel* proc = nullptr;
  const collector::OomEvent* fatal_event = nullptr;
  uint32_t device = 0;
  if (fatal) {
    for (const auto& p : run.processes)
      if (p.pid == (*fatal)["pid"].get<uint64_t>()) proc = &p;
    device = (*fatal)["device"].get<uint32_t>();
    if (proc)
      for (const auto& o : proc->ooms)
        if (o.fatal && o.device == device && !fatal_event) fatal_event = &o;
  } else {
    double best = -1;
    for (const auto& p : run.processes)
      for (const auto& [index, d] : p.devices)
        if (d.total_bytes) {
          double f = static_cast<double>(d.footprint_peak) / static_cast<double>(d.total_bytes);
          if (f > best) {
            best = f;
            proc = &p;
            device = index;
          }
        }
  }
  json dg = {
      {"verdict", fatal ? "oom" : "peak"}, {"fatal_ooms", fatal_n}, {"recovered_ooms", recovered}};
  if (!proc || !proc->devices.count(device)) return dg;
  const auto& d = proc->devices.at(device);
  const TorchMemory* tm = proc->torch_memory.get();
  std::optional<uint64_t> others;
  if (fatal && fatal->contains("held_by_others_bytes"))
    others = (*fatal)["held_by_others_bytes"].get<uint64_t>();
  collector::EffectiveLimit lim = collector::effective_limit(d.total_bytes, tm, device, others);
  dg["device"] = device;
  dg["pid"] = proc->pid;
  dg["limit"] = {{"bytes", lim.bytes}, {"kind", lim.kind}, {"title", lim.title}};
  const uint64_t held = fatal ? (*fatal)["live_bytes"].get<uint64_t>() : d.footprint_peak;
  const uint64_t request = fatal ? (*fatal)["requested_bytes"].get<uint64_t>() : 0;
  dg["held_bytes"] = held;
  dg["requested_bytes"] = request;
  dg["headroom_bytes"] = static_cast<int64_t>(lim.bytes) - static_cast<int64_t>(held);

  // The cause: the fatal OOM's first finding, else (no OOM) none.
  if (fatal && !(*fatal)["findings"].empty()) {
    const json& f = (*fatal)["findings"][0];
    // The finding's measured figures, in words.
    static const std::map<std::string, std::string> words = {
        {"requested_bytes", "requested"},
        {"live_bytes", "live in this process"},
        {"limit_bytes", "the limit"},
        {"device_free_bytes", "free on the GPU (beyond the limit)"},
        {"free_bytes", "free on the GPU"},
        {"total_bytes", "the GPU's capacity"},
        {"held_by_others_bytes", "held by other processes"},
        {"this_process_bytes", "held by this process"},
        {"free_reserved_bytes", "reserved by the allocator but free"},
        {"largest_free_block_bytes", "largest free block"},
        {"bytes_per_iteration", "growth per iteration"},
        {"grown_bytes", "grown in all"}};
    const bool kept = f["kind"] == "kept_graph" || f["kind"] == "kept_outputs";
    json ev = json::array();
    for (auto& [k, v] : f["evidence"].items())
      if (v.is_number_unsigned() && k.find("bytes") != std::string::npos) {
        auto w = words.find(k);
        std::string label = w != words.end() ? w->second : k;
        if (kept && k == "grown_bytes") label = "kept from earlier iterations";
        if (kept && k == "bytes_per_iteration") label = "kept per iteration";
        ev.push_back({{"label", label}, {"bytes", v}});
      }
    dg["cause"] = {{"kind", f["kind"]}, {"title", f["title"]}, {"evidence", ev}};
  }
  // Growth seen on this device (report.json's growth, fastest first), if any.
  const json* growth = nullptr;
  for (const json& g : report["growth"])
    if (g["pid"] == proc->pid && g["device"] == device) {
      growth = &g;
      break;
    }
  if (!tm || tm->context().blocks.empty()) {
    native_diagnosis(dg, growth, fatal, held, request, lim.bytes, d.memory.peak_bytes(), *proc,
                     device, !tm);
    if (!tm) return dg;
  }
  if (auto x = tm->context().xla.find(device); x != tm->context().xla.end()) {
    // JAX: the pool's limit, what the arrays needed at their peak, and the knobs that move it.
    json remedies = json::array();
    const uint64_t want = std::max(x->second.peak_in_use, x->second.in_use) + request;
    if (d.total_bytes && x->second.limit < d.total_bytes * 9 / 10 && want > x->second.limit) {
      const uint64_t room = d.total_bytes * 95 / 100 - x->second.limit;
      remedies.push_back({{"kind", "xla_fraction"},
                          {"title", "Give XLA's pool more of the GPU"},
                          {"saves_bytes", room},
                          {"assumption", "the GPU is not shared with another process"},
                          {"how", "XLA_PYTHON_CLIENT_MEM_FRACTION=.95"}});
    }
    dg["remedies"] = remedies;
    dg["xla_pool"] = {{"peak_in_use_bytes", x->second.peak_in_use},
                      {"limit_bytes", x->second.limit}};
    return dg;
  }
  if (tm->context().blocks.empty()) return dg;

  // The categories of the moment, from the collector as the OOM's and the peak's own are.
  collector::StackResolver stacks(*proc, symbols);
  CategoryBytes at{};
  uint64_t t = 0;
  if (fatal_event) {
    at = collector::categories_at_oom(*tm, *fatal_event, &stacks);
    t = fatal_event->time_ns;
  } else {
    const collector::PeakMoment pm = collector::peak_moment_of(*tm, d);
    at = collector::categories_at_peak(*tm, d, pm, &stacks);
    t = pm.time_ns;
  }
  bool fragmented = false;
  if (fatal)
    for (const json& f : (*fatal)["findings"])
      if (f["kind"] == "fragmentation") fragmented = true;
  collector::RemedyInput in =
      collector::remedy_input(*tm, device, t, at, lim.bytes, request, fragmented);
  if (in.partial_step) {
    in.progress = collector::first_step_progress(*tm, t);
    for (const std::string& w : proc->cmdline) in.command += (in.command.empty() ? "" : " ") + w;
  }
  // Memory the forwards keep across iterations: the cause, and the remedies that stop it first;
  // the others (a smaller batch, bf16, checkpointing) only delay the same end.
  const auto kept = collector::kept_across_iterations(*tm, device, t);
  std::vector<collector::Remedy> ranked;
  if (kept) {
    // Beyond its blocks the process held the allocator's cache, the context and libraries.
    const uint64_t held_now = fatal ? in.total : d.memory.peak_bytes();
    ranked = collector::kept_remedies(*kept, held_now > kept->in_use ? held_now - kept->in_use : 0);
    if (!dg.contains("cause"))
      dg["cause"] = {
          {"kind", collector::kept_kind_name(kept->kind)},
          {"title", collector::kept_title(*kept)},
          {"evidence",
           json::array(
               {{{"label", "kept per iteration"}, {"bytes", kept->bytes_per_iteration}},
                {{"label", "kept from earlier iterations"}, {"bytes", kept->kept_bytes}}})}};
    dg["growth"] = {{"kind", collector::kept_kind_name(kept->kind)},
                    {"bytes_per_iteration", kept->bytes_per_iteration},
                    {"kept_bytes", kept->kept_bytes},
                    {"iterations", kept->iterations_keeping}};
  } else if (growth) {
    ranked.push_back(collector::growth_remedy((*growth)["site"].get<std::string>(),
                                              (*growth)["bytes_per_iteration"].get<uint64_t>(),
                                              (*growth)["bytes"].get<uint64_t>()));
    dg["growth"] = {{"kind", "growth"},
                    {"bytes_per_iteration", (*growth)["bytes_per_iteration"]},
                    {"kept_bytes", (*growth)["bytes"]}};
  }
  const bool growing = !ranked.empty();
  for (auto r : collector::pytorch_remedies(in)) {
    if (kept && kept->kind == collector::KeptKind::Graph && r.kind == "no_grad") continue;
    r.leaves_growth = growing;
    // How large a batch fits means nothing while every iteration keeps more.
    if (growing && r.kind == "smaller_batch")
      r.how = "only delays the end: each iteration still keeps memory that the next one adds to";
    ranked.push_back(std::move(r));
  }
  json remedies = json::array();
  // Against what the moment needed: the held memory and the failed request at an OOM, the
  // device's peak otherwise (the cache the allocator keeps shrinks with what it had to hold).
  const uint64_t base = fatal ? in.total + request : d.memory.peak_bytes();
  for (auto r : ranked) {
    // Expandable segments remove the stranded pieces, not what the blocks needed earlier on.
    if (r.kind == "expandable_segments" && !r.predicted_peak)
      r.predicted_peak = std::max(base - std::min(base, r.saves_bytes), d.allocator_peak_in_use);
    remedies.push_back(remedy_json(r, base, *proc, device));
  }
  dg["remedies"] = remedies;
  dg["categories"] = bytes_json(in.at);
  return dg;
}

}  // namespace vramtrace::report

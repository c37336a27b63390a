// Growth by site and what was still live at the end (see leaks.h).
#include "collector/analysis/leaks.h"

#include <algorithm>
#include <map>

#include "collector/analysis/categories.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

std::vector<SiteGrowth> growth_by_site(const std::vector<Allocation>& live, const ProcessModel& p,
                                       uint64_t until, const SiteOf& site_of) {
  std::vector<SiteGrowth> out;
  if (p.iterations.size() < 3) return out;
  const int64_t last = p.iteration_of(until);
  if (last < 2) return out;
  struct Group {
    std::map<int64_t, uint64_t> by_iteration;
    Allocation example;
    bool blocks = false;  // PyTorch's blocks, whose times the gaps hide; else driver allocations
  };
  std::map<std::string, Group> groups;
  // PyTorch's trace off between the sampled iterations (--torch=sampled): an iteration with any
  // part in a gap shows only some of the blocks it made, and a block made in a gap has the gap's
  // end for a time, not its own. Growth of blocks is judged on the iterations traced whole
  // alone; the driver's allocations (the allocator's segments) are recorded in every iteration.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // start, end; in time order
  if (p.torch_context)
    for (const TorchGap& g : p.torch_context->gaps) gaps.push_back({g.start_ns, g.end_ns});
  std::sort(gaps.begin(), gaps.end());
  std::vector<uint64_t> gap_ends;
  for (const auto& g : gaps) gap_ends.push_back(g.second);
  std::sort(gap_ends.begin(), gap_ends.end());
  const size_t n_it = p.iterations.size();
  std::vector<bool> untraced_it(n_it, false);
  std::vector<int64_t> traced_before(n_it + 1, 0);  // traced iterations among the first i
  for (size_t i = 0; i < n_it && !gaps.empty(); ++i) {
    const uint64_t from = p.iterations[i], to = i + 1 < n_it ? p.iterations[i + 1] : UINT64_MAX;
    // Any part of it in a gap: what it made there has no iteration, so none of it counts.
    auto g = std::lower_bound(gaps.begin(), gaps.end(), std::pair{to, uint64_t{0}});
    untraced_it[i] = g != gaps.begin() && std::prev(g)->second > from;
  }
  for (size_t i = 0; i < n_it; ++i) traced_before[i + 1] = traced_before[i] + !untraced_it[i];
  const auto untraced = [&](int64_t it) { return untraced_it[static_cast<size_t>(it)]; };
  // Iterations a to b traced whole (all of them without a gap).
  const auto traced_whole = [&](int64_t a, int64_t b) {
    return std::max<int64_t>(
        traced_before[static_cast<size_t>(b) + 1] - traced_before[static_cast<size_t>(a)], 1);
  };
  for (const Allocation& a : live) {
    int64_t it = p.iteration_of(a.time_ns);
    if (it < 0) continue;  // before the first iteration: set-up, not growth
    const bool block = a.space != 0;
    if (block && std::binary_search(gap_ends.begin(), gap_ends.end(), a.time_ns))
      continue;  // made in a gap: when is not known
    if (block && untraced(it)) continue;
    Group& g = groups[site_of(a)];
    if (!g.example.stack && !g.example.py_stack) g.example = a;
    g.by_iteration[it] += a.bytes;
    g.blocks = g.blocks || block;
  }
  for (auto& [site, g] : groups) {
    const auto traced_between = [&, blocks = g.blocks](int64_t a, int64_t b) {
      return blocks ? traced_whole(a, b) : std::max<int64_t>(b - a + 1, 1);
    };
    const int64_t first = g.by_iteration.begin()->first, latest = g.by_iteration.rbegin()->first;
    const int64_t span = traced_between(first, last);
    const auto k = static_cast<int64_t>(g.by_iteration.size());
    if (k < 3 || 2 * k < span) continue;
    const int64_t after = traced_between(latest, last) - 1;
    if (after > std::max<int64_t>(1, span / 10)) continue;  // stopped growing
    uint64_t bytes = 0;
    for (auto& [it, b] : g.by_iteration) bytes += b;
    const int64_t grown = traced_between(first, latest);
    SiteGrowth s;
    s.site = site;
    s.example = g.example;
    s.bytes = bytes;
    s.bytes_per_iteration = bytes / static_cast<uint64_t>(grown);
    s.iterations = k;
    s.first_iteration = first;
    s.last_iteration = latest;
    s.since_ns = p.iterations[static_cast<size_t>(first)];
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const SiteGrowth& a, const SiteGrowth& b) {
    return a.bytes_per_iteration > b.bytes_per_iteration;
  });
  return out;
}

std::vector<SiteGrowth> device_growth(const ProcessModel& p, const DeviceModel& d,
                                      const std::vector<Allocation>& suspects,
                                      const SiteOf& site_of) {
  std::map<std::string, SiteGrowth> by_site;
  auto take = [&](std::vector<SiteGrowth> list, const char* moment) {
    for (SiteGrowth& g : list) {
      g.seen_at = moment;
      auto [it, added] = by_site.try_emplace(g.site, g);
      if (!added && g.bytes > it->second.bytes) it->second = g;
    }
  };
  take(growth_by_site(suspects, p, p.end_ns, site_of), "exit");
  std::vector<Allocation> driver_at_peak;
  for (const Allocation& a : d.live_at_peak)
    if (!held_by_pool(p, a)) driver_at_peak.push_back(a);
  take(growth_by_site(driver_at_peak, p, d.memory.peak_time(), site_of), "peak");
  if (!d.blocks_at_peak.empty())
    take(growth_by_site(d.blocks_at_peak, p, d.blocks.peak_time(), site_of), "allocator peak");
  std::vector<SiteGrowth> out;
  for (auto& [site, g] : by_site) out.push_back(std::move(g));
  std::stable_sort(out.begin(), out.end(), [](const SiteGrowth& a, const SiteGrowth& b) {
    return a.bytes_per_iteration > b.bytes_per_iteration;
  });
  return out;
}

bool process_died(const ProcessModel& p) {
  bool died = !p.clean_exit;
  if (p.torch_memory && p.torch_memory->context().exception) died = true;
  for (const auto& o : p.ooms) died = died || o.fatal;
  return died;
}

StillLive still_live(const ProcessModel& p, uint32_t device, const std::vector<Allocation>& still,
                     bool died, const LibraryOf& library_of) {
  StillLive out;
  const bool torch_clean_exit = p.torch_memory && !died;
  for (const Allocation& a : still) {
    if (held_by_pool(p, a))
      out.retained_segment_bytes += a.bytes;
    else if (torch_clean_exit && library_category(library_of(a)) == Category::Workspaces)
      out.library_workspace_bytes += a.bytes;
    else
      out.suspects.push_back(a);
  }
  for (auto& [id, pool] : p.user_pools) {
    if (pool.device != device) continue;
    for (auto& [addr, b] : pool.view.blocks()) {
      const auto* named =
          p.torch_memory ? p.torch_memory->block(b.device, b.id, b.time_ns) : nullptr;
      if (named && named->label >= 0 && !died) {
        out.model_state_bytes += b.bytes;
        continue;
      }
      if (named && !died && p.torch_memory->in_cuda_graph_pool(*named)) {
        out.cuda_graph_bytes += b.bytes;
        continue;
      }
      // cuBLAS's workspaces, which PyTorch makes through its own allocator on a handle's
      // first use and keeps for the process's life (32 MiB each on Hopper).
      if (named && !died && named->category == Category::Workspaces) {
        out.library_workspace_bytes += b.bytes;
        continue;
      }
      out.suspects.push_back(b);
    }
  }
  return out;
}

}  // namespace vramtrace::collector

// What was live at a moment, grouped by site, library and stack (see live_set.h).
#include "collector/analysis/live_set.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "collector/analysis/json_text.h"
#include "collector/model/torch_memory.h"

namespace vramtrace::collector {

Site site_of(const Allocation& a, StackResolver& stacks) {
  Site s;
  if (a.stack || a.py_stack) {
    s.stack = &stacks.attribute(a.stack, a.py_stack);
    s.text = s.stack->site;
    s.library = s.stack->library;
  }
  // A PyTorch block: what the start-up hook's context says it is (a named storage, the module
  // that made it, the user's line that ran the model, backward() or step()), unless its own
  // frames (--torch=stacks) say more. Blocks made outside the phases by no call the hook marks
  // (a factory such as torch.randint with device="cuda") take the line of their own frames,
  // which the hook records between the phases, or else of the driver call that made their
  // segment, when that segment was made for them. In a program that never ran a phase (the
  // allocator used alone), "outside forward, backward and step" says nothing: no context.
  if (a.space == 1)
    if (const auto* tm = stacks.process().torch_memory.get())
      if (const auto* b = tm->block(a.device, a.id, a.time_ns))
        if ((b->label >= 0 || !tm->phases().empty() || b->site) &&
            (s.text.empty() || b->label >= 0 || b->phase == TorchPhase::None)) {
          s.text = tm->describe(*b);
          if (b->phase == TorchPhase::None && !b->site) {
            const Attribution* at = s.stack && !s.stack->site_file.empty() ? s.stack : nullptr;
            if (!at)
              if (const Allocation* seg = stacks.segment_made_for(a))
                if (seg->stack || seg->py_stack) at = &stacks.attribute(seg->stack, seg->py_stack);
            if (at && !at->site_file.empty()) {
              s.text += " at " + at->site_file + ":" + std::to_string(at->site_line);
              s.stack = at;
              s.library = at->library;
            }
          }
        }
  if (s.text.empty())
    s.text = a.space == 1 ? "(pool block, no stack; for PyTorch: vramtrace run --torch=stacks)"
                          : format::api_name(a.api);
  return s;
}

SiteOf site_text_of(StackResolver& stacks) {
  return [&stacks](const Allocation& a) { return site_of(a, stacks).text; };
}

std::vector<SiteGroup> by_site(const std::vector<Allocation>& allocs, const StacksOf& stacks_of) {
  struct Group {
    uint64_t bytes = 0, count = 0, largest = 0;
    std::map<uint64_t, uint64_t> sizes;
    Site site;
  };
  std::map<std::string, Group> groups;
  for (const auto& a : allocs) {
    Site site = site_of(a, stacks_of(a));
    Group& g = groups[site.text];
    g.bytes += a.bytes;
    ++g.count;
    ++g.sizes[a.bytes];
    if (a.bytes > g.largest || g.count == 1) {
      g.largest = a.bytes;
      g.site = site;
    }
  }
  std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(),
            [](auto& a, auto& b) { return a.second.bytes > b.second.bytes; });
  std::vector<SiteGroup> out;
  out.reserve(sorted.size());
  for (auto& [site, g] : sorted) {
    SiteGroup sg{site, g.bytes, g.count, {}, g.site.library, g.site.stack};
    sg.sizes.assign(g.sizes.rbegin(), g.sizes.rend());
    out.push_back(std::move(sg));
  }
  return out;
}

std::vector<SiteGroup> by_site(const std::vector<Allocation>& allocs, StackResolver& stacks) {
  return by_site(allocs, [&](const Allocation&) -> StackResolver& { return stacks; });
}

std::vector<LibraryGroup> by_library(const std::vector<Allocation>& allocs,
                                     const StacksOf& stacks_of) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> groups;
  for (const auto& a : allocs) {
    std::string lib = site_of(a, stacks_of(a)).library;
    auto& g = groups[lib.empty() ? "(unknown)" : lib];
    g.first += a.bytes;
    ++g.second;
  }
  std::vector<LibraryGroup> out;
  for (auto& [lib, g] : groups) out.push_back({lib, g.first, g.second});
  std::stable_sort(out.begin(), out.end(),
                   [](const LibraryGroup& a, const LibraryGroup& b) { return a.bytes > b.bytes; });
  return out;
}

namespace {

// A stack as the report shows it: two stacks with the same text are one group.
std::string stack_identity(const Attribution& at) {
  std::string id = at.site + "\n" + at.library + "\n";
  for (const Frame& f : at.frames) {
    id += json_text(f.function) + json_text(f.file) + std::to_string(f.line);
    if (f.internal) id += " internal";
    id += f.python ? std::string(" python")
                   : " " + json_text(f.module) + " " + std::to_string(f.offset);
    id += ";";
  }
  return id;
}

}  // namespace

std::vector<StackGroup> by_stack(const std::vector<Allocation>& allocs, const StacksOf& stacks_of) {
  // (process, native leaf, Python leaf, api when without a stack): stack ids are per process.
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, int>;
  std::map<Key, std::pair<uint64_t, uint64_t>> groups;
  std::map<Key, const Allocation*> example;
  bool several = false;
  for (const auto& a : allocs) {
    bool has = a.stack || a.py_stack;
    Key key{a.process, a.stack, a.py_stack, has ? -1 : static_cast<int>(a.api)};
    auto& g = groups[key];
    g.first += a.bytes;
    ++g.second;
    example.try_emplace(key, &a);
    several = several || a.process != allocs.front().process;
  }
  if (several) {
    // Stacks that resolve to the same frames are one group, kept under the first key.
    std::map<std::string, Key> first_of;
    std::map<Key, std::pair<uint64_t, uint64_t>> merged;
    for (auto& [key, totals] : groups) {
      std::string id = "api:" + std::to_string(std::get<3>(key));
      if (std::get<3>(key) < 0) {
        const Allocation& a = *example[key];
        id = stack_identity(stacks_of(a).attribute(a.stack, a.py_stack));
      }
      auto [it, added] = first_of.try_emplace(id, key);
      auto& m = merged[it->second];
      m.first += totals.first;
      m.second += totals.second;
    }
    groups.swap(merged);
  }
  std::vector<std::pair<Key, std::pair<uint64_t, uint64_t>>> sorted(groups.begin(), groups.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::vector<StackGroup> out;
  uint64_t rest_bytes = 0, rest_count = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [key, totals] = sorted[i];
    if (i >= kTopStacks) {
      rest_bytes += totals.first;
      rest_count += totals.second;
      continue;
    }
    if (std::get<3>(key) >= 0) {
      out.push_back({format::api_name(static_cast<format::Api>(std::get<3>(key))), "", totals.first,
                     totals.second, nullptr});
      continue;
    }
    const Allocation& a = *example[key];
    const Attribution& at = stacks_of(a).attribute(std::get<1>(key), std::get<2>(key));
    out.push_back(
        {at.site.empty() ? "(unknown)" : at.site, at.library, totals.first, totals.second, &at});
  }
  if (rest_count) out.push_back({"(other stacks)", "", rest_bytes, rest_count, nullptr});
  return out;
}

LiveSet live_set(const std::vector<Allocation>& live, const StacksOf& stacks_of, size_t largest,
                 bool with_stacks) {
  LiveSet s;
  for (size_t i = 0; i < live.size() && i < largest; ++i)
    s.largest.push_back({&live[i], site_of(live[i], stacks_of(live[i]))});
  s.by_site = by_site(live, stacks_of);
  s.by_library = by_library(live, stacks_of);
  if (with_stacks) s.by_stack = by_stack(live, stacks_of);
  return s;
}

}  // namespace vramtrace::collector

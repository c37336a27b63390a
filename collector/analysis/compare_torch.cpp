// What changed inside the peak (see compare.h): PyTorch's categories at the peak with their
// budgets, the modules and the user's Python lines that hold its blocks (report.json's
// peak.by_module and peak.by_line: never the caching allocator's segments, whose site is
// whichever line made a segment, or a frame inside the allocator), the growth per iteration and
// the out-of-memory events that appeared or went, and the notes that fail nothing (a changed
// command line). Every figure is read from the two reports as report_read.h reads them back.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "collector/analysis/compare.h"
#include "common/bytes_text.h"
#include "common/printable.h"

namespace vramtrace::collector {

bool Comparison::category_regression() const {
  return std::any_of(categories.begin(), categories.end(),
                     [](const CategoryChange& c) { return c.regression; });
}

namespace {

// The device entries a row reads PyTorch's figures from: the entry itself when it has them (one
// process on the device, or a rank's own entry), else every process's entry of that device.
std::vector<const DeviceEntry*> torch_entries(const ReportRead& report, const DeviceEntry* dev) {
  if (!dev) return {};
  if (dev->has_categories) return {dev};
  std::vector<const DeviceEntry*> out;
  if (!dev->index) return out;
  for (const auto& p : report.processes)
    for (const auto& pd : p.devices)
      if (pd.index == dev->index && pd.has_categories) out.push_back(&pd);
  return out;
}

struct Torch {
  bool present = false;
  std::vector<std::string> order;
  std::map<std::string, std::string> titles;
  std::map<std::string, uint64_t> at_peak;
  std::map<std::string, std::pair<int64_t, int64_t>> modules, lines;  // bytes, count
  std::map<std::string, std::map<std::string, uint64_t>> line_categories;
  std::map<std::string, std::string> line_module;
};

Torch torch_of(const ReportRead& report, const DeviceEntry* dev) {
  Torch t;
  constexpr int64_t kCap = int64_t{1} << 62;  // sums of terms below 2^53: no overflow
  auto add = [&](std::pair<int64_t, int64_t>& slot, uint64_t bytes, uint64_t count) {
    slot.first = std::min(kCap, slot.first + static_cast<int64_t>(std::min<uint64_t>(bytes, kCap)));
    slot.second =
        std::min(kCap, slot.second + static_cast<int64_t>(std::min<uint64_t>(count, kCap)));
  };
  auto in_order = [&t](const std::string& k) {
    if (std::find(t.order.begin(), t.order.end(), k) == t.order.end()) t.order.push_back(k);
  };
  for (const DeviceEntry* e : torch_entries(report, dev)) {
    if (!e->torch) continue;
    const PeakTorch& torch = *e->torch;
    t.present = true;
    for (const auto& k : torch.order) in_order(k);
    for (const auto& [k, v] : torch.titles) t.titles[k] = v;
    for (const auto& [k, v] : torch.at_peak) {
      t.at_peak[k] = std::min<uint64_t>(kCap, t.at_peak[k] + v);
      in_order(k);
    }
    for (const auto& m : torch.by_module)
      if (!m.name.empty()) add(t.modules[m.name], m.bytes, m.count);
    for (const auto& l : torch.by_line) {
      add(t.lines[l.site], l.bytes, l.count);
      for (const auto& [k, v] : l.categories) t.line_categories[l.site][k] += v;
      if (!l.module.empty()) t.line_module[l.site] = l.module;
    }
  }
  return t;
}

std::string title_of(const Torch& a, const Torch& b, const std::string& key) {
  for (const Torch* t : {&b, &a})
    if (auto it = t->titles.find(key); it != t->titles.end()) return it->second;
  std::string s = key;
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

std::vector<SiteChange> changes_of(const std::map<std::string, std::pair<int64_t, int64_t>>& a,
                                   const std::map<std::string, std::pair<int64_t, int64_t>>& b) {
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  std::vector<SiteChange> out;
  for (const auto& n : names) {
    SiteChange c;
    c.site = printable(n);
    if (auto it = a.find(n); it != a.end())
      std::tie(c.baseline_bytes, c.baseline_count) = it->second;
    if (auto it = b.find(n); it != b.end())
      std::tie(c.candidate_bytes, c.candidate_count) = it->second;
    if (c.diff() != 0) out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const SiteChange& x, const SiteChange& y) {
    return std::llabs(x.diff()) > std::llabs(y.diff());
  });
  return out;
}

// "activations; module transformer.h.3": a line's categories (largest first) and its module, in the
// side where it holds more.
std::string line_what(const Torch& a, const Torch& b, const std::string& raw, bool in_b) {
  const Torch& t = in_b ? b : a;
  std::vector<std::pair<uint64_t, std::string>> cats;
  if (auto it = t.line_categories.find(raw); it != t.line_categories.end())
    for (const auto& [k, v] : it->second)
      if (v) cats.push_back({v, title_of(a, b, k)});
  std::stable_sort(cats.begin(), cats.end(), [](auto& x, auto& y) { return x.first > y.first; });
  std::string out;
  for (const auto& [v, title] : cats) out += (out.empty() ? "" : ", ") + title;
  if (auto it = t.line_module.find(raw); it != t.line_module.end())
    out += (out.empty() ? "module " : "; module ") + it->second;
  return printable(out);
}

}  // namespace

void compare_torch(const ReportRead& baseline, const DeviceEntry* bd, const ReportRead& candidate,
                   const DeviceEntry* cd, const Budgets& budgets, Comparison& row) {
  const Torch a = torch_of(baseline, bd), b = torch_of(candidate, cd);
  if (!a.present && !b.present) return;
  row.torch = true;
  std::vector<std::string> order = b.order;
  for (const auto& k : a.order)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  for (const auto& key : order) {
    CategoryChange c;
    c.key = key;
    c.title = printable(title_of(a, b, key));
    if (auto it = a.at_peak.find(key); it != a.at_peak.end()) c.baseline_bytes = it->second;
    if (auto it = b.at_peak.find(key); it != b.at_peak.end()) c.candidate_bytes = it->second;
    if (auto it = budgets.by_category.find(key); it != budgets.by_category.end()) {
      c.budget = it->second;
      // A budget needs both sides' figures: one side without PyTorch's categories would read
      // as 0 B and pass whatever the other holds, so the gate refuses to decide.
      if (!a.present || !b.present)
        throw CheckError("the budget on " + key + " cannot be checked on " + row.scope + ": the " +
                         (a.present ? "candidate" : "baseline") +
                         " has no PyTorch categories at its peak (not a PyTorch run, or its "
                         "start-up hook's side channel was not read)");
      c.allowed = allowed_by(it->second, c.baseline_bytes);
      c.regression = c.candidate_bytes > c.allowed;
    }
    if (c.baseline_bytes || c.candidate_bytes || c.budget) row.categories.push_back(c);
  }
  row.module_changes = changes_of(a.modules, b.modules);
  std::map<std::string, std::string> raw_of;  // printable -> as in the report
  for (const Torch* t : {&a, &b})
    for (const auto& [k, v] : t->lines) raw_of[printable(k)] = k;
  row.line_changes = changes_of(a.lines, b.lines);
  for (auto& l : row.line_changes) l.what = line_what(a, b, raw_of[l.site], l.diff() > 0);
}

std::string command_note(const ReportRead& baseline, const ReportRead& candidate) {
  const std::string bc = baseline.run ? baseline.run->command : "";
  const std::string cc = candidate.run ? candidate.run->command : "";
  if (bc.empty() || cc.empty() || bc == cc) return {};
  return printable("the candidate ran another command than the baseline: '" + cc +
                   "', the baseline '" + bc + "'");
}

void compare_run_details(const ReportRead& baseline, const ReportRead& candidate, CheckResult& r) {
  if (std::string note = command_note(baseline, candidate); !note.empty()) r.notes.push_back(note);

  // Growth per iteration, by device and site.
  auto growth_of = [](const ReportRead& rep) {
    std::map<std::pair<uint64_t, std::string>, uint64_t> out;
    for (const auto& g : rep.growth)
      if (!g.site.empty()) out[{g.device, g.site}] += g.bytes_per_iteration;
    return out;
  };
  const auto ga = growth_of(baseline), gb = growth_of(candidate);
  auto per_it = [](uint64_t v) { return human_bytes(v) + " per iteration"; };
  for (const auto& [k, v] : gb) {
    const std::string where = printable(k.second) + " (device " + std::to_string(k.first) + ")";
    auto it = ga.find(k);
    if (it == ga.end())
      r.growth_changes.push_back("new in the candidate: " + where + " grows " + per_it(v));
    else if (v > it->second + it->second / 10 || it->second > v + v / 10)
      r.growth_changes.push_back("changed: " + where + " grows " + per_it(v) + ", was " +
                                 per_it(it->second));
  }
  for (const auto& [k, v] : ga)
    if (!gb.count(k))
      r.growth_changes.push_back("gone in the candidate: " + printable(k.second) + " (device " +
                                 std::to_string(k.first) + "), which grew " + per_it(v));

  // Out-of-memory events: each side's, in words.
  auto ooms_of = [](const ReportRead& rep) {
    std::vector<std::string> out;
    for (const auto& e : rep.oom) {
      const std::string where = e.python_site.empty() ? e.site : e.python_site;
      std::string s = "device " + std::to_string(e.device.value_or(0)) + ": " +
                      human_bytes(e.requested_bytes.value_or(0)) + " requested";
      if (!where.empty()) s += " at " + where;
      std::string when = e.phase;
      if (e.iteration && *e.iteration >= 0)
        when +=
            (when.empty() ? "" : ", ") + std::string("iteration ") + std::to_string(*e.iteration);
      if (!when.empty()) s += " (" + when + ")";
      s += e.fatal ? ", fatal" : e.recovered ? ", recovered" : "";
      out.push_back(printable(s));
    }
    return out;
  };
  const auto oa = ooms_of(baseline), ob = ooms_of(candidate);
  if (oa.empty() && !ob.empty())
    for (const auto& s : ob) r.oom_changes.push_back("appeared in the candidate: " + s);
  else if (!oa.empty() && ob.empty())
    for (const auto& s : oa) r.oom_changes.push_back("gone in the candidate: " + s);
  else if (oa.size() != ob.size())
    r.oom_changes.push_back(std::to_string(oa.size()) + " -> " + std::to_string(ob.size()) +
                            " out-of-memory events; the candidate's first: " + ob[0]);
}

}  // namespace vramtrace::collector

// What changed inside the peak (see compare.h): PyTorch's categories at the peak with their
// budgets, the modules and the user's Python lines that hold its blocks (report.json's
// peak.by_module and peak.by_line: never the caching allocator's segments, whose site is
// whichever line made a segment, or a frame inside the allocator), the growth per iteration and
// the out-of-memory events that appeared or went, and the notes that fail nothing (a changed
// command line). Every figure is read from the two reports; keys are read only after checking
// their type, since compare() trusts malformed_report() for the others.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "collector/analysis/compare.h"
#include "collector/analysis/report_keys.h"
#include "common/bytes_text.h"
#include "common/printable.h"

using nlohmann::json;

namespace vramtrace::collector {

bool Comparison::category_regression() const {
  return std::any_of(categories.begin(), categories.end(),
                     [](const CategoryChange& c) { return c.regression; });
}

namespace {

const json* object_at(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_object() ? &j[key] : nullptr;
}
const json* array_at(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_array() ? &j[key] : nullptr;
}
uint64_t uint_of(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return 0;
  return j[key].is_number_unsigned()
             ? j[key].get<uint64_t>()
             : static_cast<uint64_t>(std::max<int64_t>(0, j[key].get<int64_t>()));
}
std::string string_of(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// The device entries a row reads PyTorch's figures from: the entry itself when it has them (one
// process on the device, or a rank's own entry), else every process's entry of that device.
std::vector<const json*> torch_entries(const json& report, const json* dev) {
  if (!dev) return {};
  if (object_at(*dev, field::categories)) return {dev};
  std::vector<const json*> out;
  if (!dev->contains(field::index) || !(*dev)[field::index].is_number_unsigned()) return out;
  if (const json* procs = array_at(report, field::processes))
    for (const auto& p : *procs)
      if (const json* pds = array_at(p, field::devices))
        for (const auto& pd : *pds)
          if (pd.is_object() && pd.value(field::index, json()) == (*dev)[field::index] &&
              object_at(pd, field::categories))
            out.push_back(&pd);
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

Torch torch_of(const json& report, const json* dev) {
  Torch t;
  constexpr int64_t kCap = int64_t{1} << 62;  // sums of terms below 2^53: no overflow
  auto add = [&](std::pair<int64_t, int64_t>& slot, const json& e) {
    slot.first = std::min(kCap, slot.first + static_cast<int64_t>(std::min<uint64_t>(
                                                 uint_of(e, field::bytes), kCap)));
    slot.second = std::min(kCap, slot.second + static_cast<int64_t>(std::min<uint64_t>(
                                                   uint_of(e, field::count), kCap)));
  };
  for (const json* e : torch_entries(report, dev)) {
    const json& cat = (*e)[field::categories];
    const json* at = object_at(cat, field::at_peak);
    if (!at) continue;
    t.present = true;
    if (const json* order = array_at(cat, "order"))
      for (const auto& k : *order)
        if (k.is_string() && std::find(t.order.begin(), t.order.end(), k) == t.order.end())
          t.order.push_back(k.get<std::string>());
    if (const json* titles = object_at(cat, field::titles))
      for (const auto& [k, v] : titles->items())
        if (v.is_string()) t.titles[k] = v.get<std::string>();
    for (const auto& [k, v] : at->items()) {
      if (!v.is_number_unsigned()) continue;
      t.at_peak[k] = std::min<uint64_t>(kCap, t.at_peak[k] + v.get<uint64_t>());
      if (std::find(t.order.begin(), t.order.end(), k) == t.order.end()) t.order.push_back(k);
    }
    const json* peak = object_at(*e, field::peak);
    if (!peak) continue;
    if (const json* mods = array_at(*peak, "by_module"))
      for (const auto& m : *mods)
        if (!string_of(m, field::module).empty()) add(t.modules[string_of(m, field::module)], m);
    if (const json* lines = array_at(*peak, "by_line"))
      for (const auto& l : *lines) {
        const std::string site = string_of(l, field::site);
        if (site.empty()) continue;
        add(t.lines[site], l);
        if (const json* cats = object_at(l, field::categories))
          for (const auto& [k, v] : cats->items())
            if (v.is_number_unsigned()) t.line_categories[site][k] += v.get<uint64_t>();
        if (!string_of(l, field::module).empty()) t.line_module[site] = string_of(l, field::module);
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

void compare_torch(const json& baseline, const json* bd, const json& candidate, const json* cd,
                   const Budgets& budgets, Comparison& row) {
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

std::string command_note(const json& baseline, const json& candidate) {
  auto command_of = [](const json& r) {
    const json* run = object_at(r, field::run);
    const json* cmd = run ? array_at(*run, field::command) : nullptr;
    std::string out;
    if (cmd)
      for (const auto& a : *cmd) {
        if (!a.is_string()) return std::string();
        out += (out.empty() ? "" : " ") + a.get<std::string>();
      }
    return out;
  };
  const std::string bc = command_of(baseline), cc = command_of(candidate);
  if (bc.empty() || cc.empty() || bc == cc) return {};
  return printable("the candidate ran another command than the baseline: '" + cc +
                   "', the baseline '" + bc + "'");
}

void compare_run_details(const json& baseline, const json& candidate, CheckResult& r) {
  if (std::string note = command_note(baseline, candidate); !note.empty()) r.notes.push_back(note);

  // Growth per iteration, by device and site.
  auto growth_of = [](const json& rep) {
    std::map<std::pair<uint64_t, std::string>, uint64_t> out;
    if (const json* g = array_at(rep, field::growth))
      for (const auto& e : *g) {
        const std::string site = string_of(e, field::site);
        if (!site.empty())
          out[{uint_of(e, field::device), site}] += uint_of(e, field::bytes_per_iteration);
      }
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
  auto ooms_of = [](const json& rep) {
    std::vector<std::string> out;
    if (const json* o = array_at(rep, field::oom))
      for (const auto& e : *o) {
        std::string where = string_of(e, field::python_site);
        if (where.empty()) where = string_of(e, field::site);
        std::string s = "device " + std::to_string(uint_of(e, field::device)) + ": " +
                        human_bytes(uint_of(e, field::requested_bytes)) + " requested";
        if (!where.empty()) s += " at " + where;
        std::string when = string_of(e, field::phase);
        if (e.is_object() && e.contains(field::iteration) &&
            e[field::iteration].is_number_integer() && e[field::iteration].get<int64_t>() >= 0)
          when += (when.empty() ? "" : ", ") + std::string("iteration ") +
                  std::to_string(e[field::iteration].get<int64_t>());
        if (!when.empty()) s += " (" + when + ")";
        const bool fatal = e.is_object() && e.value(field::fatal, false);
        const bool recovered = e.is_object() && e.value(field::recovered, false);
        s += fatal ? ", fatal" : recovered ? ", recovered" : "";
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

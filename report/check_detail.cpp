// What changed inside the peak, rendered for `check`, `diff` and their CI files (check.h): a
// row's PyTorch side (its categories with their budgets, modules and Python lines) and the run's
// notes, growth and OOM changes, as collector/analysis/compare.h decided them.
#include <cstdio>
#include <string>

#include "report/check.h"
#include "report/json_report.h"

using nlohmann::json;

namespace vramtrace::report {

namespace {

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string signed_bytes(int64_t d) {
  uint64_t magnitude = d < 0 ? 0 - static_cast<uint64_t>(d) : static_cast<uint64_t>(d);
  return (d < 0 ? "-" : "+") + human_bytes(magnitude);
}

// cand - base of two peaks (each up to 2^64 - 1), without a signed overflow.
std::string change_bytes(uint64_t base, uint64_t cand) {
  return cand >= base ? "+" + human_bytes(cand - base) : "-" + human_bytes(base - cand);
}

std::string percent(uint64_t base, uint64_t cand) {
  if (base == 0) return cand ? "new" : "0%";
  char buf[32];
  double p =
      100.0 * (static_cast<double>(cand) - static_cast<double>(base)) / static_cast<double>(base);
  std::snprintf(buf, sizeof buf, "%+.1f%%", p);
  return buf;
}

std::string torch_text(const Comparison& c, const char* indent) {
  if (!c.torch) return {};
  const std::string in = indent;
  std::string out, changed, same;
  for (const auto& k : c.categories) {
    if (k.diff() == 0) {
      if (k.baseline_bytes) same += (same.empty() ? "" : ", ") + k.title;
      continue;
    }
    changed += (changed.empty() ? "" : ", ") + k.title + " " + signed_bytes(k.diff()) + " (" +
               human_bytes(k.baseline_bytes) + " -> " + human_bytes(k.candidate_bytes) + ")";
  }
  out += in + "by category at the peak: " + (changed.empty() ? "no change" : changed) +
         (same.empty() ? "" : "; unchanged: " + same) + "\n";
  for (const auto& k : c.categories)
    if (k.budget)
      out += in + "budget " + k.title + " " + k.budget->text() + " (up to " +
             human_bytes(k.allowed) + "): " + signed_bytes(k.diff()) + ", " +
             (k.regression ? "REGRESSION" : "ok") + "\n";
  for (size_t i = 0; i < c.module_changes.size() && i < 5; ++i) {
    const SiteChange& m = c.module_changes[i];
    out += in + "module " + (m.diff() >= 0 ? "grew" : "shrank") + ": " + m.site + " " +
           signed_bytes(m.diff()) + "\n";
  }
  for (size_t i = 0; i < c.line_changes.size() && i < 5; ++i) {
    const SiteChange& l = c.line_changes[i];
    out += in + "line " + (l.diff() >= 0 ? "grew" : "shrank") + ": " + l.site + " " +
           signed_bytes(l.diff()) + " at the peak (" + (l.what.empty() ? "" : l.what + "; ") +
           std::to_string(l.baseline_count) + " -> " +
           plural(static_cast<uint64_t>(l.candidate_count), "block", "blocks") + ")\n";
  }
  return out;
}

std::string details_text(const CheckResult& r, const char* prefix) {
  std::string out;
  for (const auto& n : r.notes) out += prefix + std::string("NOTE: ") + n + "\n";
  for (const auto& g : r.growth_changes)
    out += prefix + std::string("growth per iteration ") + g + "\n";
  for (const auto& o : r.oom_changes) out += prefix + std::string("out-of-memory ") + o + "\n";
  return out;
}

std::string torch_markdown(const Comparison& c) {
  if (!c.torch) return {};
  std::string out = "\nBy category at the peak, " + escape_markdown(c.scope) +
                    ":\n\n| category | baseline | candidate | change | budget |\n"
                    "|---|---|---|---|---|\n";
  for (const auto& k : c.categories) {
    std::string budget = "-";
    if (k.budget)
      budget = escape_markdown(k.budget->text(), MdPlace::TableCell) +
               (k.regression ? " **regression**" : " ok");
    out += "| " + escape_markdown(k.title, MdPlace::TableCell) + " | " +
           human_bytes(k.baseline_bytes) + " | " + human_bytes(k.candidate_bytes) + " | " +
           (k.diff() == 0 ? "-"
                          : escape_markdown(signed_bytes(k.diff()) + " (" +
                                                percent(k.baseline_bytes, k.candidate_bytes) + ")",
                                            MdPlace::TableCell)) +
           " | " + budget + " |\n";
  }
  if (!c.module_changes.empty()) {
    out += "\nModules that changed most:\n\n";
    for (size_t i = 0; i < c.module_changes.size() && i < 5; ++i)
      out += "- " + escape_markdown(c.module_changes[i].site, MdPlace::LineStart) + " " +
             escape_markdown(signed_bytes(c.module_changes[i].diff())) + "\n";
  }
  if (!c.line_changes.empty()) {
    out += "\nPython lines whose PyTorch blocks changed at the peak:\n\n";
    for (size_t i = 0; i < c.line_changes.size() && i < 10; ++i) {
      const SiteChange& l = c.line_changes[i];
      out += "- " +
             escape_markdown(l.site + " " + signed_bytes(l.diff()) +
                                 (l.what.empty() ? "" : " (" + l.what + ")"),
                             MdPlace::LineStart) +
             "\n";
    }
  }
  return out;
}

std::string details_markdown(const CheckResult& r) {
  std::string out;
  for (const auto& n : r.notes) out += "\n**Note**: " + escape_markdown(n) + "\n";
  if (!r.growth_changes.empty()) {
    out += "\nGrowth per iteration:\n\n";
    for (const auto& g : r.growth_changes)
      out += "- " + escape_markdown(g, MdPlace::LineStart) + "\n";
  }
  if (!r.oom_changes.empty()) {
    out += "\nOut-of-memory events:\n\n";
    for (const auto& o : r.oom_changes) out += "- " + escape_markdown(o, MdPlace::LineStart) + "\n";
  }
  return out;
}

std::string torch_junit_detail(const Comparison& c) { return torch_text(c, ""); }

std::string category_failure(const Comparison& c) {
  std::string out;
  for (const auto& k : c.categories)
    if (k.regression)
      out += (out.empty() ? "" : "; ") + k.title + " " + signed_bytes(k.diff()) + " (" +
             human_bytes(k.candidate_bytes) + ") over budget " + k.budget->text() + " (up to " +
             human_bytes(k.allowed) + ")";
  return out;
}

json torch_html_row(const Comparison& c) {
  json cats = json::array(), lines = json::array(), mods = json::array();
  for (const auto& k : c.categories) {
    json j = {
        {"key", k.key}, {"title", k.title}, {"a", k.baseline_bytes}, {"b", k.candidate_bytes}};
    if (k.budget) {
      j["budget"] = k.budget->text();
      j["regression"] = k.regression;
    }
    cats.push_back(j);
  }
  for (const auto& l : c.line_changes)
    lines.push_back({{"site", l.site},
                     {"what", l.what},
                     {"a", l.baseline_bytes},
                     {"b", l.candidate_bytes},
                     {"a_count", l.baseline_count},
                     {"b_count", l.candidate_count}});
  for (const auto& m : c.module_changes)
    mods.push_back({{"module", m.site}, {"a", m.baseline_bytes}, {"b", m.candidate_bytes}});
  return {{"categories", cats}, {"lines", lines}, {"modules", mods}};
}

}  // namespace vramtrace::report

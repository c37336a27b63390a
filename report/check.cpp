// The CI gate and the run diff, written (see check.h): the text of `check` and `diff`, the CI
// files and the HTML diff, from the CheckResult of collector/analysis/compare.h.
#include "report/check.h"

#include <cctype>
#include <string>

#include "report/html_report.h"
#include "report/json_report.h"

using nlohmann::json;

namespace vramtrace::report {

std::string check_text(const CheckResult& r) {
  std::string out;
  for (const auto& c : r.rows) {
    std::string line = "vramtrace check: " + c.scope + ": baseline " +
                       (c.baseline_peak ? human_bytes(*c.baseline_peak) : "-") + ", candidate " +
                       (c.candidate_peak ? human_bytes(*c.candidate_peak) : "-");
    if (c.baseline_peak && c.candidate_peak) {
      line += ", " + change_bytes(*c.baseline_peak, *c.candidate_peak) + " (" +
              percent(*c.baseline_peak, *c.candidate_peak) + ")";
    }
    line += ", budget " + c.budget_text + ": " + (c.regression ? "REGRESSION" : "ok");
    if (!c.note.empty()) line += " (" + c.note + ")";
    out += line + "\n";
    // PyTorch's blocks by category, module and Python line, not its allocator's segments.
    out += torch_text(c, "  ");
    for (size_t i = 0; i < c.library_changes.size() && i < 3 && !c.torch; ++i) {
      const SiteChange& l = c.library_changes[i];
      out += "  library " + std::string(l.diff() >= 0 ? "grew" : "shrank") + ": " + l.site + " " +
             signed_bytes(l.diff()) + " at the peak\n";
    }
    size_t shown = c.torch ? 5 : 0;
    for (const auto& s : c.changes) {
      if (shown++ == 5) break;
      out += "  " + std::string(s.diff() >= 0 ? "grew" : "shrank") + ": " + s.site + " " +
             signed_bytes(s.diff()) + " at the peak (" + std::to_string(s.baseline_count) + " -> " +
             std::to_string(s.candidate_count) + " allocations)\n";
    }
  }
  if (r.rows.empty() && !r.unprofiled()) out += "vramtrace check: neither run used a CUDA device\n";
  for (const auto& p : r.not_profiled)
    out += "vramtrace check: candidate NOT PROFILED: " + p + "\n";
  for (const auto& why : r.incomplete)
    out += "vramtrace check: candidate INCOMPLETE: " + why + "\n";
  out += details_text(r, "vramtrace check: ");
  if (const size_t failed = r.failed_rows())
    out += "vramtrace check: FAILED: " + std::to_string(failed) + " of " +
           std::to_string(r.rows.size()) + " over budget\n";
  if (r.unprofiled())
    out += "vramtrace check: FAILED: " + std::to_string(r.not_profiled.size()) +
           " process(es) of the candidate not profiled: their device memory is unknown\n";
  if (r.is_incomplete())
    out +=
        "vramtrace check: FAILED: incomplete measurement: the candidate's peaks are not a "
        "whole measurement of the baseline's command\n";
  if (r.passed())
    out += "vramtrace check: PASSED: " + std::to_string(r.rows.size()) + " within budget\n";
  return printable_lines(out);
}

std::string failure_markdown(const std::string& why) {
  return "### vramtrace: peak device memory not checked\n\n**Failed**: " + escape_markdown(why) +
         "\n";
}

std::string failure_junit(const std::string& why) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<testsuites><testsuite name=\"vramtrace peak memory\" tests=\"1\" failures=\"1\">\n"
         "  <testcase classname=\"vramtrace.check\" name=\"peak memory checked\"><failure "
         "message=\"" +
         escape_xml(why) + "\">" + escape_xml(why) +
         "</failure></testcase>\n</testsuite></testsuites>\n";
}

namespace {

bool md_space(char c) { return c == ' ' || c == '\t'; }
bool md_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool md_punct(char c) { return std::ispunct(static_cast<unsigned char>(c)) != 0; }

// The index of the character that a block marker at the start of `s` would need escaped
// ("# x", "> x", "- x", "+ x", "---", "12. x", "3) x"), or npos when `s` begins no block.
size_t block_marker(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && i < 3 && s[i] == ' ') ++i;
  if (i >= s.size()) return std::string::npos;
  const auto ends_marker = [&s](size_t k) { return k >= s.size() || md_space(s[k]); };
  const char c = s[i];
  if (c == '>') return i;
  if (c == '#') {
    size_t k = i;
    while (k < s.size() && s[k] == '#') ++k;
    return k - i <= 6 && ends_marker(k) ? i : std::string::npos;
  }
  if (c == '-' || c == '+' || c == '*' || c == '_') {
    if (c != '_' && ends_marker(i + 1)) return i;  // a list item
    if (c == '+') return std::string::npos;
    size_t same = 0;  // a thematic break: three or more of one of -*_ and spaces only
    for (size_t k = i; k < s.size(); ++k) {
      if (s[k] == c)
        ++same;
      else if (!md_space(s[k]))
        return std::string::npos;
    }
    return same >= 3 ? i : std::string::npos;
  }
  size_t k = i;
  while (k < s.size() && k - i < 9 && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
  if (k > i && k < s.size() && (s[k] == '.' || s[k] == ')') && ends_marker(k + 1)) return k;
  return std::string::npos;
}

}  // namespace

std::string escape_markdown(const std::string& text, MdPlace where) {
  std::string s = text;
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';  // a string never starts a line of its own
  const size_t marker = where == MdPlace::LineStart ? block_marker(s) : std::string::npos;
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const char prev = i ? s[i - 1] : '\0', next = i + 1 < s.size() ? s[i + 1] : '\0';
    bool escape = i == marker;
    switch (ch) {
      case '`': escape = true; break;                      // code spans
      case '\\': escape = !next || md_punct(next); break;  // it would escape what follows
      case '*':
      case '~':  // emphasis and strikethrough, also inside a word; not between spaces
        escape = escape || !(md_space(prev) && md_space(next));
        break;
      case '_':  // emphasis, but not inside a word (snake_case) nor between spaces
        escape =
            escape || !((md_alnum(prev) && md_alnum(next)) || (md_space(prev) && md_space(next)));
        break;
      case '[': escape = true; break;  // links and images
      case '<':                        // HTML and autolinks
        escape = std::isalpha(static_cast<unsigned char>(next)) || next == '/' || next == '!' ||
                 next == '?';
        break;
      case '&': escape = md_alnum(next) || next == '#'; break;  // entities (&amp; &#60;)
      case '|': escape = escape || where == MdPlace::TableCell; break;
      default: break;
    }
    if (escape) out += '\\';
    out += ch;
  }
  return out;
}

std::string escape_xml(const std::string& s) { return html_escape(s); }

std::string check_markdown(const CheckResult& r) {
  std::string out = std::string("### vramtrace: peak device memory ") +
                    (r.regression()      ? "regressed"
                     : r.unprofiled()    ? "unknown: a process was not profiled"
                     : r.is_incomplete() ? "unknown: incomplete measurement"
                                         : "within budget") +
                    "\n\n";
  for (const auto& p : r.not_profiled)
    out += "**Not profiled** (its device memory is unknown): " + escape_markdown(p) + "\n\n";
  for (const auto& why : r.incomplete)
    out += "**Incomplete measurement**: " + escape_markdown(why) + "\n\n";
  out +=
      "| scope | baseline | candidate | change | budget | verdict |\n|---|---|---|---|---|---|\n";
  for (const auto& c : r.rows) {
    std::string change = "-";
    if (c.baseline_peak && c.candidate_peak)
      change = change_bytes(*c.baseline_peak, *c.candidate_peak) + " (" +
               percent(*c.baseline_peak, *c.candidate_peak) + ")";
    const MdPlace cell = MdPlace::TableCell;
    out += "| " + escape_markdown(c.scope, cell) + " | " +
           (c.baseline_peak ? human_bytes(*c.baseline_peak) : "-") + " | " +
           (c.candidate_peak ? human_bytes(*c.candidate_peak) : "-") + " | " +
           escape_markdown(change, cell) + " | " + escape_markdown(c.budget_text, cell) + " | " +
           (c.regression || c.category_regression() ? "**regression**" : "ok") +
           (c.note.empty() ? "" : " (" + escape_markdown(c.note, cell) + ")") + " |\n";
  }
  for (const auto& c : r.rows) out += torch_markdown(c);
  out += details_markdown(r);
  for (const auto& c : r.rows) {
    if (c.changes.empty() || c.torch) continue;
    out += "\nWhat changed at the peak, " + escape_markdown(c.scope) + ":\n\n";
    for (size_t i = 0; i < c.changes.size() && i < 10; ++i)
      out += "- " + escape_markdown(c.changes[i].site, MdPlace::LineStart) + " " +
             escape_markdown(signed_bytes(c.changes[i].diff())) + " (" +
             std::to_string(c.changes[i].baseline_count) + " -> " +
             std::to_string(c.changes[i].candidate_count) + " allocations)\n";
  }
  return printable_lines(out);
}

std::string check_junit(const CheckResult& r) {
  const size_t failures = r.failed_rows() + r.unprofiled() + r.is_incomplete();
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites><testsuite name=\"vramtrace peak memory\" tests=\"" +
         std::to_string(r.rows.size() + r.unprofiled() + r.is_incomplete()) + "\" failures=\"" +
         std::to_string(failures) + "\">\n";
  if (r.is_incomplete()) {
    std::string detail;
    for (const auto& why : r.incomplete) detail += why + "\n";
    out +=
        "  <testcase classname=\"vramtrace.complete\" name=\"complete measurement\">"
        "<failure message=\"" +
        escape_xml("incomplete measurement: " + r.incomplete[0] +
                   (r.incomplete.size() > 1
                        ? " (and " + std::to_string(r.incomplete.size() - 1) + " more)"
                        : std::string())) +
        "\">" + escape_xml(detail) + "</failure></testcase>\n";
  }
  if (r.unprofiled()) {
    std::string detail;
    for (const auto& p : r.not_profiled) detail += p + "\n";
    out +=
        "  <testcase classname=\"vramtrace.profiled\" name=\"every process profiled\">"
        "<failure message=\"" +
        escape_xml(std::to_string(r.not_profiled.size()) +
                   " process(es) not profiled: their device memory is unknown") +
        "\">" + escape_xml(detail) + "</failure></testcase>\n";
  }
  for (const auto& c : r.rows) {
    out += "  <testcase classname=\"vramtrace.peak\" name=\"" + escape_xml(c.scope) + "\">";
    if (c.regression || c.category_regression()) {
      std::string msg =
          c.regression
              ? "peak " + (c.candidate_peak ? human_bytes(*c.candidate_peak) : "-") +
                    " over budget " + c.budget_text +
                    (c.baseline_peak ? " (baseline " + human_bytes(*c.baseline_peak) + ")" : "")
              : category_failure(c);
      std::string detail = torch_junit_detail(c);
      for (const auto& s : c.changes)
        if (!c.torch) detail += s.site + " " + signed_bytes(s.diff()) + "\n";
      out += "<failure message=\"" + escape_xml(msg) + "\">" + escape_xml(detail) + "</failure>";
    }
    out += "</testcase>\n";
  }
  out += "</testsuite></testsuites>\n";
  return out;
}

std::string diff_text(const CheckResult& r) {
  const collector::RunTotals &a = r.baseline, &b = r.candidate;
  std::string out = "vramtrace diff: A has " + std::to_string(a.devices) + " device(s), " +
                    std::to_string(a.processes) + " process(es); B has " +
                    std::to_string(b.devices) + " device(s), " + std::to_string(b.processes) +
                    " process(es)\n";
  for (const auto& c : r.rows) {
    out += c.scope + ": peak " + (c.baseline_peak ? human_bytes(*c.baseline_peak) : "-") + " -> " +
           (c.candidate_peak ? human_bytes(*c.candidate_peak) : "-");
    if (c.baseline_peak && c.candidate_peak)
      out += " (" + change_bytes(*c.baseline_peak, *c.candidate_peak) + ", " +
             percent(*c.baseline_peak, *c.candidate_peak) + ")";
    if (!c.note.empty()) out += " [" + c.note + "]";
    out += "\n";
    out += torch_text(c, "  ");
    if (c.changes.empty() && !c.torch) out += "  live at the peak: no difference by site\n";
    for (const auto& s : c.changes) {
      if (c.torch) break;  // the allocator's segments: torch_text() names the blocks
      out += "  " + s.site + ": " + human_bytes(static_cast<uint64_t>(s.baseline_bytes)) + " in " +
             std::to_string(s.baseline_count) + " -> " +
             human_bytes(static_cast<uint64_t>(s.candidate_bytes)) + " in " +
             std::to_string(s.candidate_count) + " allocations (" + signed_bytes(s.diff()) + ")\n";
    }
  }
  out += "leak suspects: " + human_bytes(a.leak_bytes) + " -> " + human_bytes(b.leak_bytes) + "\n";
  out += "out-of-memory events: " + std::to_string(a.ooms) + " -> " + std::to_string(b.ooms) + "\n";
  // A run that is not a whole measurement (a damaged trace, a death, a cut) is said as the gate
  // says it: the figures above are of the part it kept.
  for (const auto& why : r.incomplete) out += "B INCOMPLETE: " + why + "\n";
  out += details_text(r, "");
  for (const auto& p : a.not_profiled)
    out += "A NOT PROFILED (its device memory is unknown): " + p + "\n";
  for (const auto& p : b.not_profiled)
    out += "B NOT PROFILED (its device memory is unknown): " + p + "\n";
  return printable_lines(out);
}

// The HTML diff: both runs in report.html's own views, side by side, and the sites whose live
// memory at the peak changed (html_report.cpp).
std::string diff_html(const json& a, const json& b, const CheckResult& r) {
  json changes = json::array();
  for (const auto& c : r.rows) {
    json rows = json::array();
    for (const auto& s : c.changes)
      rows.push_back({{"site", s.site},
                      {"a", s.baseline_bytes},
                      {"b", s.candidate_bytes},
                      {"a_count", s.baseline_count},
                      {"b_count", s.candidate_count}});
    json row = {{"scope", c.scope}, {"device", c.device}, {"changes", rows}};
    row["a_peak"] = c.baseline_peak ? json(*c.baseline_peak) : json(nullptr);
    row["b_peak"] = c.candidate_peak ? json(*c.candidate_peak) : json(nullptr);
    if (!c.note.empty()) row["note"] = c.note;
    if (c.torch) row["torch"] = torch_html_row(c);
    changes.push_back(row);
  }
  return diff_to_html(a, b, changes);
}

}  // namespace vramtrace::report

// The CI gate and the run diff (see check.h).
#include "report/check.h"

#include "report/html_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "collector/model/model.h"
#include "common/format.h"
#include "report/html_report.h"
#include "report/json_report.h"
#include "report/report_keys.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace vramtrace::report {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

json report_from_traces(const std::vector<std::string>& traces) {
  collector::Run run = collector::model_of(traces);
  return to_json(collector::analysis_of(run));
}

// The devices of a report by index (several hosts: the first host's index wins; documented).
std::map<uint32_t, const json*> devices_of(const json& r) {
  std::map<uint32_t, const json*> out;
  for (const auto& d : r[field::devices]) out.emplace(device_index(d), &d);
  return out;
}

// Name -> (bytes, count) live at the peak, from a device entry (or its process's entry):
// `list` is "by_site" (named by "site") or "by_library" (named by "library").
std::map<std::string, std::pair<int64_t, int64_t>> groups_of(const json& report, const json& dev,
                                                             const char* list, const char* name) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  const json* sites = nullptr;
  if (dev.contains(field::peak) && dev[field::peak].contains(list)) sites = &dev[field::peak][list];
  if (!sites) {
    for (const auto& p : report[field::processes])
      for (const auto& pd : p[field::devices])
        if (pd[field::index] == dev[field::index] && pd[field::peak].contains(list))
          sites = &pd[field::peak][list];
  }
  if (sites)
    for (const auto& s : *sites) {
      auto& slot = out[s[name].get<std::string>()];
      // Saturating at 2^62 (each term is below 2^53: load_report): differences cannot overflow.
      constexpr int64_t kCap = int64_t{1} << 62;
      slot.first = std::min(kCap, slot.first + s[field::bytes].get<int64_t>());
      slot.second = std::min(kCap, slot.second + s[field::count].get<int64_t>());
    }
  return out;
}

std::vector<SiteChange> group_changes(const json& a, const json* da, const json& b, const json* db,
                                      const char* list, const char* name) {
  std::map<std::string, std::pair<int64_t, int64_t>> sa, sb;
  if (da) sa = groups_of(a, *da, list, name);
  if (db) sb = groups_of(b, *db, list, name);
  std::set<std::string> names;
  for (auto& [k, v] : sa) names.insert(k);
  for (auto& [k, v] : sb) names.insert(k);
  std::vector<SiteChange> out;
  for (const auto& n : names) {
    SiteChange c;
    c.site = printable(n);  // a name from the traced program, shown in CI logs
    if (sa.count(n)) std::tie(c.baseline_bytes, c.baseline_count) = sa[n];
    if (sb.count(n)) std::tie(c.candidate_bytes, c.candidate_count) = sb[n];
    if (c.diff() != 0 || c.baseline_count != c.candidate_count) out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const SiteChange& x, const SiteChange& y) {
    return std::llabs(x.diff()) > std::llabs(y.diff());
  });
  return out;
}

const Budget& budget_for(const Budgets& b, uint32_t device) {
  auto it = b.max_increase_by_device.find(device);
  return it == b.max_increase_by_device.end() ? b.max_increase : it->second;
}

std::optional<uint64_t> cap_for(const Budgets& b, uint32_t device) {
  auto it = b.max_peak_by_device.find(device);
  if (it != b.max_peak_by_device.end()) return it->second;
  return b.max_peak;
}

Comparison compare_one(const std::string& scope, uint32_t device, const json* bd, const json* cd,
                       const Budgets& budgets) {
  Comparison c;
  c.scope = scope;
  c.device = device;
  const Budget& inc = budget_for(budgets, device);
  std::optional<uint64_t> cap = cap_for(budgets, device);
  if (bd) c.baseline_peak = peak_bytes(*bd);
  if (cd) c.candidate_peak = peak_bytes(*cd);
  std::string text;
  if (c.baseline_peak) {
    c.allowed_peak = allowed_by(inc, *c.baseline_peak);
    text = inc.text() + " (up to " + human_bytes(c.allowed_peak) + ")";
  } else {
    c.allowed_peak = cap.value_or(0);
  }
  if (cap) {
    c.allowed_peak = c.baseline_peak ? std::min(c.allowed_peak, *cap) : *cap;
    text += std::string(text.empty() ? "" : ", ") + "at most " + human_bytes(*cap);
  }
  c.budget_text = text.empty() ? "none" : text;
  if (!c.candidate_peak) {
    c.note = "not used by the candidate";
    return c;
  }
  if (!c.baseline_peak) {
    c.note = "new in the candidate: no baseline for it";
    c.regression = !cap || *c.candidate_peak > *cap;
    return c;
  }
  c.regression = *c.candidate_peak > c.allowed_peak;
  return c;
}

std::string rank_of(const json& proc) {
  if (!proc.contains(field::ranks)) return {};
  for (const char* key : kRankVariables)
    if (proc[field::ranks].contains(key)) return proc[field::ranks][key].get<std::string>();
  return {};
}

}  // namespace

std::string Budget::text() const {
  char buf[48];
  if (percent) {
    std::snprintf(buf, sizeof buf, "+%g%%", *percent);
    return buf;
  }
  return "+" + human_bytes(bytes.value_or(0));
}

namespace {
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Digits with at most one '.', at least one digit: what a budget's number may be. strtod alone
// also reads "0x10" (16), "1e3", "+5", "inf" and leading spaces.
bool plain_decimal(const std::string& s) {
  return std::count(s.begin(), s.end(), '.') <= 1 && std::any_of(s.begin(), s.end(), is_digit) &&
         std::all_of(s.begin(), s.end(), [](char c) { return c == '.' || is_digit(c); });
}
}  // namespace

namespace {

// A size in bytes; `with_percent`: the value of --max-increase, whose messages name
// percentages too.
uint64_t parse_size_of(const std::string& raw, bool with_percent) {
  const std::string not_size =
      "'" + raw +
      (with_percent ? "' is not a percentage or a size (examples: 5%, 256MiB)"
                    : "' is not a size (examples: 256MiB, 40GiB, 1048576)");
  std::string s = trim(raw);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) throw CheckError(not_size);
  char* end = nullptr;
  const std::string num = s.substr(0, i);
  double v = std::strtod(num.c_str(), &end);  // not stod: "." and 400 digits must not throw
  if (!end || *end != '\0' || !std::isfinite(v)) throw CheckError(not_size);
  std::string unit = trim(s.substr(i));
  // "0x10", "1e3", "1 2": what follows the number is more number, not a unit.
  if (std::any_of(unit.begin(), unit.end(), [](char c) { return c == '.' || is_digit(c); }))
    throw CheckError(not_size);
  std::string u;
  for (char ch : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"b", 1},
                                                      {"k", 1024.0},
                                                      {"kib", 1024.0},
                                                      {"m", 1048576.0},
                                                      {"mib", 1048576.0},
                                                      {"g", 1073741824.0},
                                                      {"gib", 1073741824.0},
                                                      {"t", 1099511627776.0},
                                                      {"tib", 1099511627776.0},
                                                      {"kb", 1e3},
                                                      {"mb", 1e6},
                                                      {"gb", 1e9},
                                                      {"tb", 1e12}};
  auto it = units.find(u);
  if (it == units.end())
    throw CheckError("'" + raw + "': unknown unit '" + unit + "' (use " +
                     (with_percent ? "%, " : "") + "B, KiB, MiB, GiB, TiB)");
  if (v * it->second >= 18446744073709549568.0)  // the largest double below 2^64
    throw CheckError("'" + raw + "': too large");
  return static_cast<uint64_t>(std::round(v * it->second));  // llround stops at 2^63
}

}  // namespace

uint64_t parse_size(const std::string& raw) { return parse_size_of(raw, false); }

Budget parse_increase(const std::string& raw) {
  std::string s = trim(raw);
  Budget b;
  if (!s.empty() && s.back() == '%') {
    std::string num = trim(s.substr(0, s.size() - 1));
    char* end = nullptr;
    double p = plain_decimal(num) ? std::strtod(num.c_str(), &end) : -1;
    if (num.empty() || !end || *end != '\0' || !(p >= 0) || !std::isfinite(p))
      throw CheckError("'" + raw + "' is not a percentage (example: 5%)");
    b.percent = p;
  } else if (plain_decimal(s) && std::strtod(s.c_str(), nullptr) == 0.0) {
    // Zero is the same in every unit: no growth at all ("parameters:0").
    b.bytes = 0;
  } else if (plain_decimal(s)) {
    // "--max-increase 5" read as 5 bytes fails any growth at all: a share or a size is meant.
    throw CheckError("'" + raw + "' has no unit: write " + s +
                     "% for a share of the baseline's peak, or " + s + "MiB for a size");
  } else {
    b.bytes = parse_size_of(s, true);
  }
  return b;
}

namespace {
// "1:10%" -> device 1, "10%". A plain value has no device. `categories`: the option also takes
// CATEGORY:BUDGET, which the message of a word that is neither then lists.
std::pair<std::optional<uint32_t>, std::string> split_device(const std::string& v,
                                                             bool categories) {
  size_t colon = v.find(':');
  if (colon == std::string::npos) return {std::nullopt, v};
  std::string dev = trim(v.substr(0, colon));
  if (dev.empty() || dev.size() > 9 || !std::all_of(dev.begin(), dev.end(), ::isdigit)) {
    std::string names;
    for (const auto& k : category_keys()) names += (names.empty() ? "" : ", ") + k;
    throw CheckError("'" + v + "': expected DEVICE:BUDGET, e.g. 1:10%" +
                     (categories ? ", or CATEGORY:BUDGET with one of PyTorch's categories (" +
                                       names + "), e.g. activations:5%"
                                 : std::string()));
  }
  return {static_cast<uint32_t>(std::stoul(dev)), v.substr(colon + 1)};
}
}  // namespace

void given_once(Budgets& b, const std::string& option, const std::string& scope,
                const std::string& value) {
  auto [it, added] = b.given.try_emplace(option + " " + scope, value);
  if (!added)
    throw CheckError("'" + value + "': a second " + option + " for " + scope + " (the first: '" +
                     it->second + "'): give each budget once");
}

void add_increase_option(Budgets& b, const std::string& value) {
  if (add_category_option(b, value)) return;
  auto [dev, rest] = split_device(value, true);
  given_once(b, "--max-increase", dev ? "device " + std::to_string(*dev) : "every device", value);
  if (dev)
    b.max_increase_by_device[*dev] = parse_increase(rest);
  else
    b.max_increase = parse_increase(rest);
}

void add_peak_option(Budgets& b, const std::string& value) {
  auto [dev, rest] = split_device(value, false);
  given_once(b, "--max-peak", dev ? "device " + std::to_string(*dev) : "every device", value);
  if (dev)
    b.max_peak_by_device[*dev] = parse_size(rest);
  else
    b.max_peak = parse_size(rest);
}

namespace {

std::optional<int64_t> run_int(const json& r, const char* key) {
  if (!r.contains(field::run) || !r[field::run].is_object() || !r[field::run].contains(key) ||
      !r[field::run][key].is_number_integer())
    return std::nullopt;
  return r[field::run][key].get<int64_t>();
}

// What is wrong with a report for compare(), check_*() and diff_*(), which read these keys
// without looking (a missing key there would be undefined behaviour, a wrong type a
// json::exception): "" when nothing is. Sizes and counts of sites stay below 2^53 (the integers
// JSON keeps exact), so that their sums and differences cannot overflow.
std::string malformed(const json& r) {
  constexpr uint64_t kMaxExact = 1ull << 53;
  auto uint_at = [](const json& j, const char* key, uint64_t max) {
    return j.is_object() && j.contains(key) && j[key].is_number_unsigned() &&
           j[key].get<uint64_t>() <= max;
  };
  // peak.by_site (named by "site") and peak.by_library (by "library"), when there.
  auto groups_ok = [&](const json& peak, const char* list, const char* name) {
    if (!peak.contains(list)) return true;
    if (!peak[list].is_array()) return false;
    for (const auto& s : peak[list])
      if (!s.is_object() || !s.contains(name) || !s[name].is_string() ||
          !uint_at(s, field::bytes, kMaxExact) || !uint_at(s, field::count, kMaxExact))
        return false;
    return true;
  };
  auto device_ok = [&](const json& d) {
    return uint_at(d, field::index, UINT32_MAX) && d.contains(field::peak) &&
           uint_at(d[field::peak], field::bytes, UINT64_MAX) &&
           groups_ok(d[field::peak], field::by_site, field::site);
  };
  // PyTorch's categories at the peak, which the budgets per category are checked against: a
  // figure that is not a whole number of bytes (a string, null, negative, 1e300) is a malformed
  // report, never read as 0 and passed.
  auto categories_ok = [&](const json& d) {
    if (!d.is_object() || !d.contains(field::categories)) return true;
    const json& c = d[field::categories];
    if (!c.is_object()) return false;
    if (!c.contains(field::at_peak)) return true;
    if (!c[field::at_peak].is_object()) return false;
    for (const auto& [k, v] : c[field::at_peak].items())
      if (!v.is_number_unsigned() || v.get<uint64_t>() > kMaxExact) return false;
    return true;
  };
  const char* bad_categories = "categories.at_peak with a figure that is not a size in bytes";
  const char* bad_libraries = "a peak.by_library entry without library, bytes or count";
  for (const char* key : {field::devices, field::processes, field::leaks, field::oom})
    if (!r.contains(key) || !r[key].is_array()) return std::string("no \"") + key + "\" array";
  for (const auto& d : r[field::devices]) {
    if (!device_ok(d) || !d.contains(field::name) || !d[field::name].is_string())
      return "a device without index, name or peak.bytes";
    if (!groups_ok(d[field::peak], field::by_library, field::library)) return bad_libraries;
    if (!categories_ok(d)) return bad_categories;
  }
  for (const auto& p : r[field::processes]) {
    if (!p.is_object() || !p.contains(field::devices) || !p[field::devices].is_array())
      return "a process without devices";
    for (const auto& d : p[field::devices]) {
      if (!device_ok(d) || !d[field::peak].contains(field::by_site))
        return "a process's device without index or peak";
      if (!groups_ok(d[field::peak], field::by_library, field::library)) return bad_libraries;
      if (!categories_ok(d)) return bad_categories;
    }
    // unprofiled_processes() reads these.
    if ((p.contains(field::profiled) && !p[field::profiled].is_boolean()) ||
        (p.contains(field::not_profiled_reason) && !p[field::not_profiled_reason].is_string()) ||
        (p.contains(field::notices) &&
         (!p[field::notices].is_array() ||
          !std::all_of(p[field::notices].begin(), p[field::notices].end(),
                       [](const json& n) { return n.is_string(); }))) ||
        (p.contains(field::pid) && !p[field::pid].is_number_unsigned()) ||
        (p.contains(field::exe) && !p[field::exe].is_string()))
      return "a process whose pid, exe, profiled, not_profiled_reason or notices are of the "
             "wrong type";
    if (p.contains(field::ranks)) {
      if (!p[field::ranks].is_object()) return "ranks that are not an object";
      for (const auto& [k, v] : p[field::ranks].items())
        if (!v.is_string()) return "a rank that is not a string";
    }
  }
  for (const auto& l : r[field::leaks])
    if (!uint_at(l, field::bytes, kMaxExact)) return "a leak without bytes";
  // compare() reads these three when both runs have a worst rank.
  if (r.contains(field::worst_rank)) {
    const json& w = r[field::worst_rank];
    if (!w.is_object() || !w.contains(field::rank) || !uint_at(w, field::peak_bytes, UINT64_MAX) ||
        !uint_at(w, field::device, UINT32_MAX))
      return "a worst_rank without rank, peak_bytes or device";
  }
  return {};
}

}  // namespace

// A JSON file, parsed; throws CheckError saying where it stops being JSON (the parser's own
// message names its internals: "[json.exception.parse_error.101] ...").
json parse_json_file(const std::string& file, const std::string& what) {
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw CheckError(what + ": cannot be read");
  if (trim(text).empty()) throw CheckError(what + ": not a vramtrace report (an empty file)");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const size_t line = 1 + std::count(text.begin(), text.begin() + at, '\n');
    const size_t newline = at ? text.rfind('\n', at - 1) : std::string::npos;
    const size_t column = at - (newline == std::string::npos ? 0 : newline + 1) + 1;
    throw CheckError(what + ": not a vramtrace report (not JSON: " +
                     (at >= text.size() ? std::string("it ends too early, at line ")
                                        : std::string("a syntax error at line ")) +
                     std::to_string(line) + ", column " + std::to_string(column) + ")");
  }
}

json load_report(const std::string& path, const std::string& role) {
  std::error_code ec;
  const std::string what = role + " " + printable(path);
  if (!fs::exists(path, ec)) throw CheckError(what + ": no such file or directory");
  json r;
  try {
    if (fs::is_directory(path, ec)) {
      if (fs::exists(fs::path(path) / "report.json", ec)) {
        r = parse_json_file((fs::path(path) / "report.json").string(), what + "/report.json");
      } else {
        std::vector<std::string> traces;
        for (const auto& e : fs::directory_iterator(path, ec))
          if (e.path().extension() == ".vtrace") traces.push_back(e.path().string());
        std::sort(traces.begin(), traces.end());
        if (traces.empty())
          throw CheckError(what + ": a directory with neither report.json nor traces");
        r = report_from_traces(traces);
      }
    } else if (collector::starts_as_trace(path)) {
      r = report_from_traces({path});
    } else {
      r = parse_json_file(path, what);
    }
  } catch (const json::exception&) {
    throw CheckError(what + ": not a vramtrace report");
  } catch (const collector::TraceError& e) {
    throw CheckError(what + ": " + printable(e.what()));
  }
  if (!r.is_object() || !r.contains(field::schema))
    throw CheckError(what + ": not a vramtrace report (no \"schema\" key)");
  if (r[field::schema] != kSchema)
    throw CheckError(
        what + ": report schema " +
        printable(r[field::schema].dump(-1, ' ', false, json::error_handler_t::replace)) +
        ", this vramtrace reads \"" + kSchema + "\"");
  std::string problem = malformed(r);
  if (!problem.empty()) throw CheckError(what + ": malformed report (" + problem + ")");
  return r;
}

std::vector<std::string> unprofiled_processes(const json& r) {
  std::vector<std::string> out;
  for (const auto& p : r[field::processes]) {
    std::string reason;
    if (p.contains(field::profiled)) {
      if (p[field::profiled].get<bool>()) continue;
      reason = p.value(field::not_profiled_reason, std::string());
    } else if (p.contains(field::notices) && !p[field::notices].empty()) {
      reason = p[field::notices][0].get<std::string>();  // a report from before "profiled"
    } else {
      continue;
    }
    std::string exe = p.value(field::exe, std::string());
    exe = exe.substr(exe.find_last_of('/') + 1);
    std::string pid = p.contains(field::pid) ? std::to_string(p[field::pid].get<uint64_t>()) : "?";
    out.push_back("pid " + pid + (exe.empty() ? "" : " (" + printable(exe) + ")") + ": " +
                  (reason.empty() ? "no reason given" : printable(reason)));
  }
  return out;
}

void require_profiled_baseline(const json& baseline, const std::string& path) {
  // Every device of the candidate would then be "new: no baseline for it", a regression that
  // is only the baseline's own failure.
  if (baseline[field::processes].empty()) {
    const std::optional<int64_t> exit_code = run_int(baseline, field::exit_code);
    const std::optional<int64_t> sig = run_int(baseline, field::signal);
    std::string how;
    if (exit_code == 127)
      how = " (its command exited 127: not found)";
    else if (exit_code && *exit_code != 0)
      how = " (its command exited " + std::to_string(*exit_code) + ")";
    else if (sig)
      how = " (its command was killed by signal " + std::to_string(*sig) + ")";
    throw CheckError("baseline " + printable(path) +
                     ": no profiled process, so no peak to compare with" + how +
                     "; record the baseline again from a run whose command used CUDA");
  }
  std::vector<std::string> missing = unprofiled_processes(baseline);
  if (missing.empty()) return;
  throw CheckError("baseline " + path + ": " + std::to_string(missing.size()) +
                   " process(es) not profiled, so its peaks are unknown (" + missing[0] +
                   (missing.size() > 1 ? "; and " + std::to_string(missing.size() - 1) + " more"
                                       : std::string()) +
                   "); record the baseline again where vramtrace can profile every process");
}

int gate_exit_code(const CheckResult& r) {
  if (r.regression()) return kExitRegression;
  if (r.unprofiled()) return kExitNotProfiled;
  return r.is_incomplete() ? kExitIncomplete : 0;
}

namespace {

const char* signal_name(int sig) {
  switch (sig) {
    case 1: return "SIGHUP";
    case 2: return "SIGINT";
    case 3: return "SIGQUIT";
    case 4: return "SIGILL";
    case 5: return "SIGTRAP";
    case 6: return "SIGABRT";
    case 7: return "SIGBUS";
    case 8: return "SIGFPE";
    case 9: return "SIGKILL";
    case 11: return "SIGSEGV";
    case 13: return "SIGPIPE";
    case 14: return "SIGALRM";
    case 15: return "SIGTERM";
    default: return nullptr;
  }
}

}  // namespace

std::vector<std::string> incomplete_reasons(const json& baseline, const json& candidate,
                                            const std::optional<uint32_t>& only_device,
                                            bool unprofiled) {
  std::vector<std::string> why;
  if (!candidate.is_object() || !baseline.is_object()) return {"not a report"};
  const json no_list = json::array();
  const json& procs = candidate.contains(field::processes) && candidate[field::processes].is_array()
                          ? candidate[field::processes]
                          : no_list;
  auto exe_of = [](const json& p) {
    std::string exe =
        p.contains(field::exe) && p[field::exe].is_string() ? p[field::exe].get<std::string>() : "";
    exe = exe.substr(exe.find_last_of('/') + 1);
    std::string pid = p.contains(field::pid) && p[field::pid].is_number_unsigned()
                          ? std::to_string(p[field::pid].get<uint64_t>())
                          : "?";
    return "pid " + pid + (exe.empty() ? "" : " (" + exe + ")");
  };
  const std::optional<int64_t> exit_code = run_int(candidate, field::exit_code);
  const std::optional<int64_t> sig = run_int(candidate, field::signal);
  if (procs.empty()) {
    std::string how;
    if (exit_code == 127) how = " (the command exited 127: not found)";
    why.push_back(
        "the candidate has no profiled process: no process of its command reached "
        "vramtrace" +
        how);
  }
  // Devices the baseline was measured on and the candidate was not.
  if (!unprofiled && candidate.contains(field::devices) && candidate[field::devices].is_array() &&
      baseline.contains(field::devices) && baseline[field::devices].is_array()) {
    std::set<uint64_t> have;
    for (const auto& d : candidate[field::devices])
      if (d.is_object() && d.contains(field::index) && d[field::index].is_number_unsigned())
        have.insert(d[field::index].get<uint64_t>());
    for (const auto& d : baseline[field::devices]) {
      if (!d.is_object() || !d.contains(field::index) || !d[field::index].is_number_unsigned())
        continue;
      uint64_t i = d[field::index].get<uint64_t>();
      if (have.count(i) || (only_device && *only_device != i)) continue;
      std::string name =
          d.contains(field::name) && d[field::name].is_string() ? " (" + device_name(d) + ")" : "";
      why.push_back("no measurement for device " + std::to_string(i) + name +
                    ", which the baseline has");
    }
  }
  if (sig) {
    const char* name = signal_name(static_cast<int>(*sig));
    why.push_back("cut short: the command was killed by signal " + std::to_string(*sig) +
                  (name ? std::string(" (") + name + ")" : std::string()));
  } else if (exit_code && *exit_code != 0 && !procs.empty()) {
    why.push_back("cut short: the command exited " + std::to_string(*exit_code));
  }
  for (const auto& p : procs) {
    if (!p.is_object()) continue;
    const bool cut = p.contains(field::cut_short) && p[field::cut_short].is_boolean()
                         ? p[field::cut_short].get<bool>()
                         : (p.contains(field::clean_exit) && p[field::clean_exit].is_boolean() &&
                            !p[field::clean_exit].get<bool>());
    if (cut) why.push_back("cut short: " + exe_of(p) + " did not exit cleanly");
  }
  if (candidate.contains(field::run) && candidate[field::run].is_object()) {
    const json& run = candidate[field::run];
    if (run.contains(field::problems) && run[field::problems].is_array())
      for (const auto& problem : run[field::problems])
        if (problem.is_string()) why.push_back("damaged trace: " + problem.get<std::string>());
    // Whatever else made the report say so (a report of a later version, say).
    if (why.empty() && run.contains(field::complete) && run[field::complete].is_boolean() &&
        !run[field::complete].get<bool>())
      why.push_back("cut short: the report says the run is not complete");
  }
  // Each reason may quote the program (its command line, executable, device name): one line,
  // safe for a terminal and a CI log.
  for (auto& w : why) w = printable(w);
  return why;
}

bool CheckResult::regression() const {
  return std::any_of(rows.begin(), rows.end(),
                     [](const Comparison& c) { return c.regression || c.category_regression(); });
}

CheckResult compare(const json& baseline, const json& candidate, const Budgets& budgets) {
  CheckResult result;
  result.not_profiled = unprofiled_processes(candidate);
  auto bdev = devices_of(baseline), cdev = devices_of(candidate);
  std::set<uint32_t> indices;
  for (auto& [i, d] : bdev) indices.insert(i);
  for (auto& [i, d] : cdev) indices.insert(i);
  // A device that --device or a per-device budget names but neither run has would be checked
  // by nothing and pass: a typo in a CI job must fail instead.
  auto require_device = [&](uint32_t device, const std::string& what) {
    if (indices.count(device)) return;
    std::string have;
    for (uint32_t i : indices) have += (have.empty() ? "" : ", ") + std::to_string(i);
    throw CheckError(what + " names device " + std::to_string(device) +
                     ", which neither report has (" +
                     (have.empty() ? std::string("no devices") : "devices: " + have) + ")");
  };
  if (budgets.only_device) require_device(*budgets.only_device, "--device");
  for (const auto& [device, budget] : budgets.max_increase_by_device)
    require_device(device, "--max-increase");
  for (const auto& [device, cap] : budgets.max_peak_by_device) require_device(device, "--max-peak");
  for (uint32_t i : indices) {
    if (budgets.only_device && *budgets.only_device != i) continue;
    const json* b = bdev.count(i) ? bdev[i] : nullptr;
    const json* c = cdev.count(i) ? cdev[i] : nullptr;
    const json* any = c ? c : b;
    std::string scope = "device " + std::to_string(i) + " (" +
                        printable((*any)[field::name].get<std::string>()) + ")";
    Comparison row = compare_one(scope, i, b, c, budgets);
    row.changes = group_changes(baseline, b, candidate, c, field::by_site, field::site);
    row.library_changes =
        group_changes(baseline, b, candidate, c, field::by_library, field::library);
    compare_torch(baseline, b, candidate, c, budgets, row);
    result.rows.push_back(std::move(row));
  }

  // Ranks: when the runs have several processes with a rank, each rank's devices too.
  auto ranked = [](const json& r) {
    std::map<std::pair<std::string, uint32_t>, const json*> out;
    if (r[field::processes].size() < 2) return out;
    for (const auto& p : r[field::processes]) {
      std::string rank = rank_of(p);
      if (rank.empty()) continue;
      for (const auto& d : p[field::devices]) out[{rank, device_index(d)}] = &d;
    }
    return out;
  };
  // The worst rank of each run, whichever rank that is.
  if (baseline.contains(field::worst_rank) && candidate.contains(field::worst_rank) &&
      !budgets.only_device) {
    json bw = {{field::peak, {{field::bytes, baseline[field::worst_rank][field::peak_bytes]}}}};
    json cw = {{field::peak, {{field::bytes, candidate[field::worst_rank][field::peak_bytes]}}}};
    // A rank from a trace is the process's environment: any bytes, not always UTF-8.
    auto rank = [](const json& r) {
      return printable(
          r[field::worst_rank][field::rank].dump(-1, ' ', false, json::error_handler_t::replace));
    };
    std::string scope = "worst rank (rank " + rank(baseline) + " -> rank " + rank(candidate) + ")";
    uint32_t dev = candidate[field::worst_rank][field::device].get<uint32_t>();
    result.rows.push_back(compare_one(scope, dev, &bw, &cw, budgets));
  }
  auto br = ranked(baseline), cr = ranked(candidate);
  std::set<std::pair<std::string, uint32_t>> keys;
  for (auto& [k, v] : br) keys.insert(k);
  for (auto& [k, v] : cr) keys.insert(k);
  for (const auto& k : keys) {
    if (budgets.only_device && *budgets.only_device != k.second) continue;
    const json* b = br.count(k) ? br[k] : nullptr;
    const json* c = cr.count(k) ? cr[k] : nullptr;
    std::string scope = "rank " + printable(k.first) + ", device " + std::to_string(k.second);
    Comparison row = compare_one(scope, k.second, b, c, budgets);
    row.changes = group_changes(baseline, b, candidate, c, field::by_site, field::site);
    row.library_changes =
        group_changes(baseline, b, candidate, c, field::by_library, field::library);
    compare_torch(baseline, b, candidate, c, budgets, row);
    result.rows.push_back(std::move(row));
  }
  result.incomplete =
      incomplete_reasons(baseline, candidate, budgets.only_device, result.unprofiled());
  compare_run_details(baseline, candidate, result);
  if (!budgets.by_category.empty() &&
      std::none_of(result.rows.begin(), result.rows.end(), [](auto& r) { return r.torch; }))
    result.notes.push_back(
        "the budgets per category were not checked: neither run has PyTorch's categories");
  // A device or rank the candidate lacks may be one of the processes that were not profiled.
  if (result.unprofiled())
    for (auto& row : result.rows)
      if (!row.candidate_peak) row.note = "not in the candidate, which has a process not profiled";
  return result;
}

std::string check_text(const CheckResult& r) {
  std::string out;
  int failed = 0;
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
    if (c.regression || c.category_regression()) ++failed;
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
  if (failed)
    out += "vramtrace check: FAILED: " + std::to_string(failed) + " of " +
           std::to_string(r.rows.size()) + " over budget\n";
  if (r.unprofiled())
    out += "vramtrace check: FAILED: " + std::to_string(r.not_profiled.size()) +
           " process(es) of the candidate not profiled: their device memory is unknown\n";
  if (r.is_incomplete())
    out +=
        "vramtrace check: FAILED: incomplete measurement: the candidate's peaks are not a "
        "whole measurement of the baseline's command\n";
  if (!failed && !r.unprofiled() && !r.is_incomplete())
    out += "vramtrace check: PASSED: " + std::to_string(r.rows.size()) + " within budget\n";
  return out;
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
  return out;
}

std::string check_junit(const CheckResult& r) {
  int failures = r.unprofiled() + r.is_incomplete();
  for (const auto& c : r.rows) failures += c.regression || c.category_regression();
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

std::string diff_text(const json& a, const json& b, const CheckResult& r) {
  std::string out = "vramtrace diff: A has " + std::to_string(a[field::devices].size()) +
                    " device(s), " + std::to_string(a[field::processes].size()) +
                    " process(es); B has " + std::to_string(b[field::devices].size()) +
                    " device(s), " + std::to_string(b[field::processes].size()) + " process(es)\n";
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
  auto final_bytes = [](const json& r) {
    uint64_t t = 0;
    for (const auto& l : r[field::leaks]) t += l[field::bytes].get<uint64_t>();
    return t;
  };
  out +=
      "leak suspects: " + human_bytes(final_bytes(a)) + " -> " + human_bytes(final_bytes(b)) + "\n";
  out += "out-of-memory events: " + std::to_string(a[field::oom].size()) + " -> " +
         std::to_string(b[field::oom].size()) + "\n";
  out += details_text(r, "");
  for (const auto& p : unprofiled_processes(a))
    out += "A NOT PROFILED (its device memory is unknown): " + p + "\n";
  for (const auto& p : unprofiled_processes(b))
    out += "B NOT PROFILED (its device memory is unknown): " + p + "\n";
  return out;
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

// The comparison of a candidate run with a baseline (see compare.h): by device, by rank and
// for the worst rank, with the candidate's processes not profiled and why it is incomplete.
#include "collector/analysis/compare.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "collector/analysis/ranks.h"
#include "collector/analysis/report_keys.h"
#include "common/bytes_text.h"
#include "common/printable.h"

using nlohmann::json;

namespace vramtrace::collector {

namespace {

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

std::optional<int64_t> run_int(const json& r, const char* key) {
  if (!r.contains(field::run) || !r[field::run].is_object() || !r[field::run].contains(key) ||
      !r[field::run][key].is_number_integer())
    return std::nullopt;
  return r[field::run][key].get<int64_t>();
}

}  // namespace

std::string malformed_report(const json& r) {
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
  // A run that died of running out of memory measured a job that never finished: its peak is
  // that of the moment it died, not of the job. Said whichever form the candidate comes in (its
  // own report.json has the command's exit status; a report made again from its traces, or its
  // folder, has the OOM and each process's exit status, which the traces keep).
  if (candidate.contains(field::oom) && candidate[field::oom].is_array())
    for (const auto& o : candidate[field::oom]) {
      if (!o.is_object() || !o.contains(field::fatal) || o[field::fatal] != true) continue;
      std::string what = "died of out-of-memory";
      if (o.contains(field::device) && o[field::device].is_number_unsigned())
        what += ": device " + std::to_string(o[field::device].get<uint64_t>());
      if (o.contains(field::requested_bytes) && o[field::requested_bytes].is_number_unsigned())
        what += ", " + human_bytes(o[field::requested_bytes].get<uint64_t>()) + " requested";
      why.push_back(what);
      break;
    }
  for (const auto& p : procs) {
    if (!p.is_object()) continue;
    if (!exit_code && p.contains(field::exit_status) && p[field::exit_status].is_number_integer() &&
        p[field::exit_status].get<int64_t>() != 0)
      why.push_back("cut short: " + exe_of(p) + " exited " +
                    std::to_string(p[field::exit_status].get<int64_t>()));
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

size_t CheckResult::failed_rows() const {
  return static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [](const Comparison& c) {
    return c.regression || c.category_regression();
  }));
}

namespace {

// Read with care: compare() is also given reports that malformed_report() never saw (tests,
// tools), and these keys are only the diff's.
RunTotals totals_of(const json& r) {
  RunTotals t;
  auto size_of = [&r](const char* key) {
    return r.contains(key) && r[key].is_array() ? r[key].size() : 0;
  };
  t.devices = size_of(field::devices);
  t.processes = size_of(field::processes);
  t.ooms = size_of(field::oom);
  if (size_of(field::leaks))
    for (const auto& l : r[field::leaks])
      if (l.is_object() && l.contains(field::bytes) && l[field::bytes].is_number_unsigned())
        t.leak_bytes += l[field::bytes].get<uint64_t>();
  t.not_profiled = unprofiled_processes(r);
  return t;
}

}  // namespace

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
  // What the baseline itself measured, said beside the verdict: a baseline that did not finish,
  // or one of another GPU model (whose context, library workspaces and allocator rounding
  // differ), is a weaker budget than the job page would suggest.
  for (const auto& why : incomplete_reasons(candidate, baseline, budgets.only_device, false))
    if (why.rfind("no measurement for device", 0) != 0)
      result.notes.push_back("the baseline is not a whole measurement: " + why);
  for (uint32_t i : indices) {
    if (budgets.only_device && *budgets.only_device != i) continue;
    if (!bdev.count(i) || !cdev.count(i)) continue;
    const std::string bn = device_name(*bdev[i]), cn = device_name(*cdev[i]);
    if (!bn.empty() && !cn.empty() && bn != cn)
      result.notes.push_back("device " + std::to_string(i) + " is another GPU model in each run: " +
                             printable(bn) + " in the baseline, " + printable(cn) +
                             " in the candidate; compare runs on the same model");
  }
  compare_run_details(baseline, candidate, result);
  // A budget that checks nothing must not pass a CI job that asked for it.
  if (!budgets.by_category.empty() &&
      std::none_of(result.rows.begin(), result.rows.end(), [](auto& r) { return r.torch; }))
    throw CheckError(
        "the budgets per category cannot be checked: neither run has PyTorch's categories (not "
        "a PyTorch run, or its start-up hook's side channel was not read)");
  // A device or rank the candidate lacks may be one of the processes that were not profiled.
  if (result.unprofiled())
    for (auto& row : result.rows)
      if (!row.candidate_peak) row.note = "not in the candidate, which has a process not profiled";
  result.baseline = totals_of(baseline);
  result.candidate = totals_of(candidate);
  return result;
}

}  // namespace vramtrace::collector

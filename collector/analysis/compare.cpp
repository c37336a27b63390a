// The comparison of a candidate run with a baseline (see compare.h): by device, by rank and
// for the worst rank, with the candidate's processes not profiled and why it is incomplete.
#include "collector/analysis/compare.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "collector/analysis/ranks.h"
#include "common/bytes_text.h"
#include "common/printable.h"

namespace vramtrace::collector {

namespace {

// The devices of a report by index (several hosts: the first host's index wins; documented).
std::map<uint32_t, const DeviceEntry*> devices_of(const ReportRead& r) {
  std::map<uint32_t, const DeviceEntry*> out;
  for (const auto& d : r.devices)
    if (d.index) out.emplace(*d.index, &d);
  return out;
}

// Name -> (bytes, count) live at the peak, from a device entry, or else from its process's
// entry of that device: `list` is the entry's by_site or by_library.
using GroupList = std::optional<std::vector<PeakGroup>> DeviceEntry::*;
std::map<std::string, std::pair<int64_t, int64_t>> groups_of(const ReportRead& report,
                                                             const DeviceEntry& dev,
                                                             GroupList list) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  const std::vector<PeakGroup>* groups = (dev.*list) ? &*(dev.*list) : nullptr;
  if (!groups)
    for (const auto& p : report.processes)
      for (const auto& pd : p.devices)
        if (pd.index == dev.index && (pd.*list)) groups = &*(pd.*list);
  if (groups)
    for (const auto& g : *groups) {
      auto& slot = out[g.name];
      // Saturating at 2^62 (each term is below 2^53: malformed_report): differences cannot
      // overflow.
      constexpr int64_t kCap = int64_t{1} << 62;
      slot.first =
          std::min(kCap, slot.first + static_cast<int64_t>(std::min<uint64_t>(g.bytes, kCap)));
      slot.second =
          std::min(kCap, slot.second + static_cast<int64_t>(std::min<uint64_t>(g.count, kCap)));
    }
  return out;
}

std::vector<SiteChange> group_changes(const ReportRead& a, const DeviceEntry* da,
                                      const ReportRead& b, const DeviceEntry* db, GroupList list) {
  std::map<std::string, std::pair<int64_t, int64_t>> sa, sb;
  if (da) sa = groups_of(a, *da, list);
  if (db) sb = groups_of(b, *db, list);
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

Comparison compare_one(const std::string& scope, uint32_t device, const DeviceEntry* bd,
                       const DeviceEntry* cd, const Budgets& budgets) {
  Comparison c;
  c.scope = scope;
  c.device = device;
  const Budget& inc = budget_for(budgets, device);
  std::optional<uint64_t> cap = cap_for(budgets, device);
  if (bd) c.baseline_peak = bd->peak_bytes;
  if (cd) c.candidate_peak = cd->peak_bytes;
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

std::string rank_of(const ProcessEntry& proc) {
  for (const char* key : kRankVariables)
    if (auto it = proc.ranks.find(key); it != proc.ranks.end()) return it->second;
  return {};
}

std::optional<int64_t> run_int(const ReportRead& r, std::optional<int64_t> RunEntry::*key) {
  return r.run ? (*r.run).*key : std::nullopt;
}

}  // namespace

std::vector<std::string> unprofiled_processes(const ReportRead& r) {
  std::vector<std::string> out;
  for (const auto& p : r.processes) {
    std::string reason;
    if (p.profiled) {
      if (*p.profiled) continue;
      reason = p.not_profiled_reason;
    } else if (!p.notices.empty()) {
      reason = p.notices[0];  // a report from before "profiled"
    } else {
      continue;
    }
    const std::string exe = p.exe.substr(p.exe.find_last_of('/') + 1);
    const std::string pid = p.pid ? std::to_string(*p.pid) : "?";
    out.push_back("pid " + pid + (exe.empty() ? "" : " (" + printable(exe) + ")") + ": " +
                  (reason.empty() ? "no reason given" : printable(reason)));
  }
  return out;
}

void require_profiled_baseline(const ReportRead& baseline, const std::string& path) {
  // Every device of the candidate would then be "new: no baseline for it", a regression that
  // is only the baseline's own failure.
  if (baseline.processes.empty()) {
    const std::optional<int64_t> exit_code = run_int(baseline, &RunEntry::exit_code);
    const std::optional<int64_t> sig = run_int(baseline, &RunEntry::signal);
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

std::vector<std::string> incomplete_reasons(const ReportRead& baseline, const ReportRead& candidate,
                                            const std::optional<uint32_t>& only_device,
                                            bool unprofiled) {
  std::vector<std::string> why;
  if (!candidate.is_object || !baseline.is_object) return {"not a report"};
  const std::vector<ProcessEntry>& procs = candidate.processes;
  auto exe_of = [](const ProcessEntry& p) {
    const std::string exe = p.exe.substr(p.exe.find_last_of('/') + 1);
    const std::string pid = p.pid ? std::to_string(*p.pid) : "?";
    return "pid " + pid + (exe.empty() ? "" : " (" + exe + ")");
  };
  const std::optional<int64_t> exit_code = run_int(candidate, &RunEntry::exit_code);
  const std::optional<int64_t> sig = run_int(candidate, &RunEntry::signal);
  if (procs.empty()) {
    std::string how;
    if (exit_code == 127) how = " (the command exited 127: not found)";
    why.push_back(
        "the candidate has no profiled process: no process of its command reached "
        "vramtrace" +
        how);
  }
  // Devices the baseline was measured on and the candidate was not.
  if (!unprofiled) {
    std::set<uint32_t> have;
    for (const auto& d : candidate.devices)
      if (d.index) have.insert(*d.index);
    for (const auto& d : baseline.devices) {
      if (!d.index || have.count(*d.index) || (only_device && *only_device != *d.index)) continue;
      std::string name = d.name ? " (" + *d.name + ")" : "";
      why.push_back("no measurement for device " + std::to_string(*d.index) + name +
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
  for (const auto& o : candidate.oom) {
    if (!o.fatal) continue;
    std::string what = "died of out-of-memory";
    if (o.device) what += ": device " + std::to_string(*o.device);
    if (o.requested_bytes) what += ", " + human_bytes(*o.requested_bytes) + " requested";
    why.push_back(what);
    break;
  }
  for (const auto& p : procs) {
    if (!exit_code && p.exit_status && *p.exit_status != 0)
      why.push_back("cut short: " + exe_of(p) + " exited " + std::to_string(*p.exit_status));
    const bool cut = p.cut_short ? *p.cut_short : (p.clean_exit && !*p.clean_exit);
    if (cut) why.push_back("cut short: " + exe_of(p) + " did not exit cleanly");
  }
  if (candidate.run) {
    for (const auto& problem : candidate.run->problems) why.push_back("damaged trace: " + problem);
    // Whatever else made the report say so (a report of a later version, say).
    if (why.empty() && candidate.run->complete && !*candidate.run->complete)
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

RunTotals totals_of(const ReportRead& r) {
  RunTotals t;
  t.devices = r.devices.size();
  t.processes = r.processes.size();
  t.ooms = r.oom.size();
  for (uint64_t bytes : r.leak_bytes) t.leak_bytes += bytes;
  t.not_profiled = unprofiled_processes(r);
  return t;
}

}  // namespace

bool CheckResult::regression() const {
  return std::any_of(rows.begin(), rows.end(),
                     [](const Comparison& c) { return c.regression || c.category_regression(); });
}

CheckResult compare(const ReportRead& baseline, const ReportRead& candidate,
                    const Budgets& budgets) {
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
  // A row's figures: its peak, what changed at it by site and by library, and PyTorch's side.
  auto row_of = [&](const std::string& scope, uint32_t device, const DeviceEntry* b,
                    const DeviceEntry* c) {
    Comparison row = compare_one(scope, device, b, c, budgets);
    row.changes = group_changes(baseline, b, candidate, c, &DeviceEntry::by_site);
    row.library_changes = group_changes(baseline, b, candidate, c, &DeviceEntry::by_library);
    compare_torch(baseline, b, candidate, c, budgets, row);
    return row;
  };
  for (uint32_t i : indices) {
    if (budgets.only_device && *budgets.only_device != i) continue;
    const DeviceEntry* b = bdev.count(i) ? bdev[i] : nullptr;
    const DeviceEntry* c = cdev.count(i) ? cdev[i] : nullptr;
    const DeviceEntry* any = c ? c : b;
    std::string scope =
        "device " + std::to_string(i) + " (" + printable(any->name.value_or("")) + ")";
    result.rows.push_back(row_of(scope, i, b, c));
  }

  // Ranks: when the runs have several processes with a rank, each rank's devices too.
  auto ranked = [](const ReportRead& r) {
    std::map<std::pair<std::string, uint32_t>, const DeviceEntry*> out;
    if (r.processes.size() < 2) return out;
    for (const auto& p : r.processes) {
      std::string rank = rank_of(p);
      if (rank.empty()) continue;
      for (const auto& d : p.devices)
        if (d.index) out[{rank, *d.index}] = &d;
    }
    return out;
  };
  // The worst rank of each run, whichever rank that is.
  if (baseline.worst_rank && candidate.worst_rank && !budgets.only_device) {
    DeviceEntry bw, cw;
    bw.peak_bytes = baseline.worst_rank->peak_bytes;
    cw.peak_bytes = candidate.worst_rank->peak_bytes;
    // A rank from a trace is the process's environment: any bytes, not always UTF-8.
    std::string scope = "worst rank (rank " + printable(baseline.worst_rank->rank) + " -> rank " +
                        printable(candidate.worst_rank->rank) + ")";
    result.rows.push_back(compare_one(scope, candidate.worst_rank->device, &bw, &cw, budgets));
  }
  auto br = ranked(baseline), cr = ranked(candidate);
  std::set<std::pair<std::string, uint32_t>> keys;
  for (auto& [k, v] : br) keys.insert(k);
  for (auto& [k, v] : cr) keys.insert(k);
  for (const auto& k : keys) {
    if (budgets.only_device && *budgets.only_device != k.second) continue;
    const DeviceEntry* b = br.count(k) ? br[k] : nullptr;
    const DeviceEntry* c = cr.count(k) ? cr[k] : nullptr;
    std::string scope = "rank " + printable(k.first) + ", device " + std::to_string(k.second);
    result.rows.push_back(row_of(scope, k.second, b, c));
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
    const std::string bn = bdev[i]->name.value_or(""), cn = cdev[i]->name.value_or("");
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

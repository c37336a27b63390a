// The few lines printed on stderr after a run or `vramtrace report`: what was not profiled,
// each device's peak (against its effective limit) and what it was made of, the OOMs with their
// moment and likely cause, the remedies, ranks, leak suspects, growth and warnings. Read from
// report.json alone, as `check` and `diff` read it, through report/report_keys.h.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "report/json_report.h"
#include "report/report_keys.h"

namespace vramtrace::report {

using nlohmann::json;

namespace {

constexpr size_t kMaxNotProfiledLines = 10;  // of the summary; report.json has them all

// What the blocks at a device's peak are when PyTorch's peak came while the trace was off: the
// highest moment traced stands for it in a steady run; otherwise the device's peak in the gap,
// where only the blocks live all through it are known one by one.
const char* peak_blocks_shown(const json& r, uint64_t device) {
  for (const auto& d : r[field::devices])
    if (d.value(field::index, uint64_t{0}) == device && d.contains(field::categories) &&
        d[field::categories].contains("at_peak_moment") &&
        d[field::categories]["at_peak_moment"].value("kind", "") == "allocator_in_use_peak")
      return "the blocks shown are of the highest moment traced";
  return "what was made and freed then is unclassified; the blocks shown are those live all "
         "through it (parameters, optimizer state)";
}

// What is not in the report qualifies every figure after it: processes not profiled, launches
// not recorded.
std::string not_profiled_lines(const json& r) {
  std::string out;
  size_t not_profiled = 0;
  for (const auto& p : r[field::processes]) {
    if (p.value(field::profiled, true)) continue;
    if (++not_profiled > kMaxNotProfiledLines) continue;
    std::string exe = p[field::exe].get<std::string>();
    exe = exe.substr(exe.find_last_of('/') + 1);
    out += "vramtrace: NOT PROFILED: pid " + std::to_string(p[field::pid].get<uint64_t>()) +
           (exe.empty() ? "" : " (" + printable(exe) + ")") + ": " +
           printable(p[field::not_profiled_reason].get<std::string>()) + "\n";
  }
  if (not_profiled > kMaxNotProfiledLines)
    out += "vramtrace: NOT PROFILED: " + std::to_string(not_profiled - kMaxNotProfiledLines) +
           " more process(es) (processes[].not_profiled_reason in report.json)\n";
  if (not_profiled)
    out += "vramtrace: WARNING: " + std::to_string(not_profiled) + " of " +
           std::to_string(r[field::processes].size()) +
           " process(es) not profiled: the device memory they used is unknown and not in this "
           "report\n";
  else if (r[field::devices].empty())
    out += "vramtrace: no CUDA device memory was used\n";
  // Launches off: say so once, naming the processes when only some of them were.
  std::vector<std::string> no_launches;
  for (const auto& p : r[field::processes])
    if (p.contains(field::launches) && p[field::launches].is_object() &&
        p[field::launches].value(field::recorded, true) == false && p.contains(field::pid))
      no_launches.push_back(p[field::pid].dump());
  if (!no_launches.empty()) {
    std::string who;
    if (no_launches.size() < r[field::processes].size()) {
      who = " in pid";
      for (size_t i = 0; i < no_launches.size() && i < kMaxNotProfiledLines; ++i)
        who += (i ? ", " : " ") + no_launches[i];
      if (no_launches.size() > kMaxNotProfiledLines) who += " and others";
    }
    out += "vramtrace: NOTE: kernel launches not recorded" + who +
           " (--launches=off): no launch counts, no kernel at the peak, no iterations from the "
           "launch rhythm\n";
  }
  // --torch=sampled: what the block view lacks, and a peak it did not see.
  const uint64_t origin = cuda_start_ns(r);
  for (const auto& p : r[field::processes]) {
    if (!p.contains("torch_allocator_trace") || !p["torch_allocator_trace"].contains("sampled"))
      continue;
    const json& t = p["torch_allocator_trace"];
    const json& s = t["sampled"];
    // By default, the collector's note of what the trace would have cost of an iteration.
    std::string why = "--torch=sampled";
    if (t.contains("cost") && t["cost"].contains("note") && t["cost"]["note"].is_string())
      why = t["cost"]["note"].get<std::string>();
    out += "vramtrace: NOTE: pid " + p.value(field::pid, json(0)).dump() +
           ": PyTorch's blocks recorded in the sampled iterations only (" + why +
           "): " + std::to_string(s["gaps"].size()) +
           " stretch(es) without them, where what was made and freed is known, not when\n";
    for (const auto& k : s["peak_between"]) {
      char line[512];
      const auto at = [&](const char* key) {
        const uint64_t t = k[key].get<uint64_t>();
        return static_cast<double>(t > origin ? t - origin : 0) / 1e9;
      };
      std::snprintf(line, sizeof line,
                    "vramtrace: NOTE: device %llu: PyTorch's peak of allocated memory, %s, came "
                    "between %.3f s and %.3f s, while the trace was off: %s (--torch=full "
                    "records every one)\n",
                    static_cast<unsigned long long>(k[field::device].get<uint64_t>()),
                    human_bytes(k[field::bytes].get<uint64_t>()).c_str(), at("start_ns"),
                    at("end_ns"), peak_blocks_shown(r, k[field::device].get<uint64_t>()));
      out += line;
    }
  }
  return out;
}

// Each device's peak, against its effective limit when the run had a tighter one than the card,
// and what the memory was at the peak.
std::string device_lines(const json& r) {
  std::string out;
  char line[512];
  for (const auto& d : r[field::devices]) {
    uint64_t peak = peak_bytes(d);
    uint64_t total = total_bytes(d);
    // On the page's clock: from the run's first CUDA work.
    const uint64_t origin = cuda_start_ns(r), t = peak_time_ns(d);
    const double at_s = static_cast<double>(t > origin ? t - origin : 0) / 1e9;
    std::snprintf(line, sizeof line, "vramtrace: device %u (%s): peak %s", device_index(d),
                  printable(device_name(d)).substr(0, 300).c_str(), human_bytes(peak).c_str());
    out += line;
    // Against the effective limit when the run had a tighter one than the card.
    const json* lim = nullptr;
    if (r.contains(field::diagnosis) && r[field::diagnosis].contains(field::limit) &&
        r[field::diagnosis][field::device] == d[field::index] &&
        r[field::diagnosis][field::limit][field::kind] != "device")
      lim = &r[field::diagnosis][field::limit];
    if (lim) {
      const uint64_t lb = (*lim)[field::bytes].get<uint64_t>();
      std::snprintf(line, sizeof line, " of its %s limit (%.1f%%; %s)", human_bytes(lb).c_str(),
                    lb ? 100.0 * static_cast<double>(peak) / static_cast<double>(lb) : 0.0,
                    (*lim)[field::title].get<std::string>().c_str());
      out += line;
    } else if (total) {
      std::snprintf(line, sizeof line, " of %s (%.1f%%)", human_bytes(total).c_str(),
                    100.0 * static_cast<double>(peak) / static_cast<double>(total));
      out += line;
    }
    bool died_here = false;  // a process on this device died holding memory
    if (r.contains(field::live_at_death))
      for (const auto& l : r[field::live_at_death])
        died_here = died_here || l[field::device] == d[field::index];
    std::snprintf(line, sizeof line, " %.3f s after the %s; %s still live at the end%s\n", at_s,
                  origin ? "first CUDA work" : "start", human_bytes(final_live_bytes(d)).c_str(),
                  died_here ? " (the program died holding it)" : "");
    out += line;
    if (d.contains(field::categories)) {
      // What the memory was at the peak, largest first.
      std::vector<std::pair<uint64_t, std::string>> cats;
      for (auto& [k, v] : d[field::categories][field::at_peak].items())
        if (v.get<uint64_t>())
          cats.push_back({v.get<uint64_t>(), d[field::categories][field::titles].value(k, k)});
      std::sort(cats.rbegin(), cats.rend());
      std::string text = "vramtrace:   at the peak:";
      for (size_t i = 0; i < cats.size() && i < 5; ++i)
        text += (i ? ", " : " ") + cats[i].second + " " + human_bytes(cats[i].first);
      out += text + "\n";
    }
  }
  return out;
}

// With a fatal OOM known, the failures the job survived are counted on one line and the fatal
// one gets the diagnosis: where, why, and what to do.
std::string oom_lines(const json& r) {
  std::string out;
  char line[512];
  bool any_fatal = false;
  uint64_t survived = 0;
  for (const auto& o : r[field::oom]) any_fatal = any_fatal || o.value(field::fatal, false);
  for (const auto& o : r[field::oom]) {
    if (any_fatal && !o.value(field::fatal, false)) {
      ++survived;
      continue;
    }
    std::snprintf(line, sizeof line,
                  "vramtrace: OUT OF MEMORY on device %u: %s requested with %s live (pid %llu)\n",
                  o[field::device].get<unsigned>(), human_bytes(requested_bytes(o)).c_str(),
                  human_bytes(o[field::live_bytes].get<uint64_t>()).c_str(),
                  static_cast<unsigned long long>(o[field::pid].get<uint64_t>()));
    if (o.value(field::recovered, false)) {
      std::snprintf(line, sizeof line,
                    "vramtrace: device %u: a %s request failed and was retried after the "
                    "allocator freed its cache (not an OOM of the program)\n",
                    o[field::device].get<unsigned>(), human_bytes(requested_bytes(o)).c_str());
      out += line;
      continue;
    }
    out += line;
    if (o.contains(field::phase)) {
      std::string where = "vramtrace:   when: " + printable(o[field::phase].get<std::string>());
      if (o.contains(field::module))
        where += " of " + printable(o[field::module].get<std::string>());
      if (o.contains(field::iteration) && o[field::iteration].get<int64_t>() >= 0)
        where += ", iteration " + std::to_string(o[field::iteration].get<int64_t>());
      if (o.contains(field::python_site))
        where += ", at " + printable(o[field::python_site].get<std::string>());
      out += where + "\n";
    }
    if (o.contains(field::findings) && !o[field::findings].empty())
      out += "vramtrace:   likely cause: " +
             printable(o[field::findings][0][field::title].get<std::string>()) + "\n";
  }
  if (survived) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu other allocation failure(s) were survived (a library's "
                  "workspace attempt that fell back, a caught error): see report.json oom[]\n",
                  static_cast<unsigned long long>(survived));
    out += line;
  }
  return out;
}

// A remedy: what it saves and what it leads to, in the collector's words (remedies[].outcome:
// the one peak it leads to, for PyTorch its replay through the allocator's model, or why it
// could not be replayed), as the page says it.
std::string remedy_line(const json& m) {
  const std::string outcome =
      m.contains("outcome") && m["outcome"].is_string() ? m["outcome"].get<std::string>() : "";
  // An OOM finding's advice (no remedy was looked for): its words alone, nothing measured.
  if (m[field::how].get<std::string>().empty() && !m.contains(field::predicted_peak_bytes))
    return "vramtrace:   remedy: " + printable(m[field::title].get<std::string>()) + "\n";
  return "vramtrace:   remedy: " + printable(m[field::title].get<std::string>()) + ": saves " +
         human_bytes(m[field::saves_bytes].get<uint64_t>()) +
         (outcome.empty() ? "" : "; " + printable(outcome)) + " (" +
         printable(m[field::how].get<std::string>()) + ")\n";
}

std::string diagnosis_lines(const json& r) {
  std::string out;
  if (!r.contains(field::diagnosis)) return out;
  const json& dg = r[field::diagnosis];
  // A job that did not die but keeps memory across iterations: the cause, before the remedies.
  if (dg.value(field::verdict, "") != "oom" && dg.contains(field::cause))
    out += "vramtrace:   growing: " + printable(dg[field::cause][field::title].get<std::string>()) +
           "\n";
  size_t n = 0;
  for (const auto& m : dg.value(field::remedies, json::array())) {
    if (n++ == 3) break;
    out += remedy_line(m);
  }
  return out;
}

std::string rank_line(const json& r) {
  if (!r.contains(field::worst_rank)) return "";
  char line[512];
  const json& w = r[field::worst_rank];
  std::snprintf(line, sizeof line,
                "vramtrace: %zu ranks; worst rank %s: peak %s on device %u; max/mean %.2f\n",
                r[field::ranks].size(),
                printable(w[field::rank].dump(-1, ' ', false, json::error_handler_t::replace))
                    .substr(0, 100)
                    .c_str(),
                human_bytes(w[field::peak_bytes].get<uint64_t>()).c_str(),
                w[field::device].get<unsigned>(),
                r[field::rank_imbalance][field::max_over_mean].get<double>());
  return line;
}

// What was left at the end: live when a process died, leak suspects, kept across iterations.
std::string left_at_end_lines(const json& r) {
  std::string out;
  char line[512];
  uint64_t leak_bytes = 0, leak_count = 0, kept_bytes = 0, kept_count = 0;
  for (const auto& l : r[field::leaks]) {
    if (l.contains(field::kept)) {
      kept_bytes += l[field::bytes].get<uint64_t>();
      kept_count += l[field::count].get<uint64_t>();
      continue;
    }
    leak_bytes += l[field::bytes].get<uint64_t>();
    leak_count += l[field::count].get<uint64_t>();
  }
  uint64_t dead_bytes = 0;
  if (r.contains(field::live_at_death))
    for (const auto& l : r[field::live_at_death]) dead_bytes += l[field::bytes].get<uint64_t>();
  if (dead_bytes)
    out += "vramtrace: " + human_bytes(dead_bytes) +
           " was live when the process died (not counted as leaks)\n";
  if (leak_count) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu allocation(s), %s, still live at exit (leak suspects)\n",
                  static_cast<unsigned long long>(leak_count), human_bytes(leak_bytes).c_str());
    out += line;
  }
  if (kept_count) {
    std::snprintf(line, sizeof line,
                  "vramtrace: %llu block(s), %s, still live at exit were kept across iterations "
                  "by the forwards (the cause above), not leaked\n",
                  static_cast<unsigned long long>(kept_count), human_bytes(kept_bytes).c_str());
    out += line;
  }
  return out;
}

// The five fastest sites, then the total of the rest (a graph kept alive grows at every module
// of the model: dozens of sites).
std::string growth_lines(const json& r) {
  std::string out;
  if (!r.contains(field::growth)) return out;
  char line[512];
  size_t n = 0;
  uint64_t rest = 0, rest_sites = 0;
  for (const auto& g : r[field::growth]) {
    if (n++ >= 5) {
      rest += g[field::bytes_per_iteration].get<uint64_t>();
      ++rest_sites;
      continue;
    }
    std::snprintf(line, sizeof line,
                  "vramtrace: grows by %s per iteration over %lld iterations: %s\n",
                  human_bytes(g[field::bytes_per_iteration].get<uint64_t>()).c_str(),
                  static_cast<long long>(g[field::iterations].get<int64_t>()),
                  printable(g[field::site].get<std::string>()).substr(0, 300).c_str());
    out += line;
  }
  if (rest_sites) {
    std::snprintf(line, sizeof line,
                  "vramtrace: ... and %s per iteration more at %llu other sites (report.json "
                  "growth[])\n",
                  human_bytes(rest).c_str(), static_cast<unsigned long long>(rest_sites));
    out += line;
  }
  return out;
}

// Processes still running, events dropped, the run's problems.
std::string warning_lines(const json& r) {
  std::string out;
  for (const auto& p : r[field::processes])
    if (p.value(field::still_running, false) && p.contains(field::pid))
      out += "vramtrace: NOTE: pid " + p[field::pid].dump() +
             " was still running when the report was written: what it held then is not counted "
             "as leaked\n";
  if (const uint64_t dropped = r[field::run][field::dropped_events].get<uint64_t>()) {
    char line[512];
    std::snprintf(line, sizeof line, "vramtrace: WARNING: %llu events were dropped (buffer full)\n",
                  static_cast<unsigned long long>(dropped));
    out += line;
  }
  for (const auto& p : r[field::run][field::problems])
    out += "vramtrace: WARNING: " + printable(p.get<std::string>()) + "\n";
  // Allocations that failed for another reason than memory (an invalid size, no context): a
  // program's bug rather than its memory, said by process.
  for (const auto& p : r[field::processes]) {
    if (!p.contains("failed_allocations") || !p["failed_allocations"].is_array()) continue;
    std::string failed;
    for (const auto& f : p["failed_allocations"])
      if (f.is_object() && f.contains("error") && f["error"].is_string() &&
          f.value(field::count, json(0)).is_number_unsigned())
        failed += (failed.empty() ? "" : ", ") + f["error"].get<std::string>() + " x " +
                  std::to_string(f[field::count].get<uint64_t>());
    if (!failed.empty())
      out += "vramtrace: NOTE: pid " + p.value(field::pid, json(0)).dump() +
             ": allocations that failed for another reason than memory: " + printable(failed) +
             "\n";
  }
  return out;
}

// `vramtrace plan`'s lines: per process stopped for a plan, the step's predicted peak against
// the limit, the largest batch that fits, each remedy's peak, what the prediction could not see
// and what the plan cost.
std::string plan_lines(const json& r) {
  std::string out;
  if (!r.contains("plan")) return out;
  const std::string head = "vramtrace: PLAN: ";
  for (const json& p : r["plan"].value("processes", json::array())) {
    const uint64_t batch = p.value("batch", uint64_t{0});
    char line[512];
    const bool own = p.value("loss", std::string()) == "program";
    std::snprintf(line, sizeof line,
                  "process %llu stopped before its first training step ran on the GPU (batch "
                  "%llu); %s in %.2f s; %s, the model and optimizer put back\n",
                  static_cast<unsigned long long>(p.value("pid", uint64_t{0})),
                  static_cast<unsigned long long>(batch),
                  own ? "the program's own loop ran its steps on fake tensors (its loss, scaler, "
                        "zero_grad and accumulation)"
                      : "the step was predicted on fake tensors",
                  p.value("fake_step_seconds", 0.0),
                  p.value("rng_restored", false) ? "RNG states restored"
                                                 : "RNG states not read (none to restore)");
    out += head + line;
    for (const json& d : p.value("devices", json::array())) {
      const std::string dev = "device " + std::to_string(d.value("device", 0u)) + ": ";
      if (!d.value("predicted", false)) {
        out += head + dev + "no prediction: " + printable(d.value("error", std::string())) + "\n";
        continue;
      }
      const uint64_t limit = d.value("limit_bytes", uint64_t{0});
      const bool by_fraction =
          d.contains("fraction_limit_bytes") && d["fraction_limit_bytes"].get<uint64_t>() < limit;
      const uint64_t reserved = d.value("reserved_peak_bytes", uint64_t{0});
      out += head + dev + "the whole step peaks at " +
             human_bytes(d.value("peak_bytes", uint64_t{0})) + " (PyTorch reserved " +
             human_bytes(reserved) + " + " + human_bytes(d.value("outside_bytes", uint64_t{0})) +
             " outside PyTorch) against " +
             (by_fraction ? "PyTorch's per-process fraction of " +
                                human_bytes(d["fraction_limit_bytes"].get<uint64_t>())
                          : "a limit of " + human_bytes(limit)) +
             (d.value("fits", false)
                  ? ": fits, " + human_bytes(d.value("free_bytes", uint64_t{0})) + " to spare\n"
                  : ": will run out of memory, " + human_bytes(d.value("over_bytes", uint64_t{0})) +
                        " over\n");
      const json largest = d.value("largest_batch", json());
      out +=
          head + dev +
          (largest.is_number() ? std::string("the largest batch that fits is ") +
                                     (d.value("largest_batch_at_least", false) ? "at least " : "") +
                                     std::to_string(largest.get<uint64_t>())
                               : std::string("no batch fits, down to 1 % of this one")) +
          " (this one: " + std::to_string(d.value("batch", batch)) + "; 1.5 % kept free)\n";
      for (const json& m : d.value("remedies", json::array())) {
        const std::string what = printable(m.value("label", m.value("kind", std::string())));
        out +=
            head + dev + "  " + what + ": " +
            (m.value("replayed", false)
                 ? "peak " + human_bytes(m.value("peak_bytes", uint64_t{0})) +
                       (m.value("fits", false) ? " (fits)" : " (runs out)")
                 : "not replayed: " + printable(m.value("not_replayed_because", std::string()))) +
            "\n";
      }
    }
    for (const json& n : p.value("notes", json::array()))
      out += head + printable(n.get<std::string>()) + "\n";
    for (const json& u : p.value("unseen", json::array()))
      out += head + "not seen: " + printable(u.get<std::string>()) + "\n";
  }
  return out;
}

// `vramtrace run --preflight`'s check of its own prediction: per process and device, the first
// step's predicted reserved peak beside the one recorded over the same two iterations.
std::string preflight_lines(const json& r) {
  std::string out;
  if (!r.contains("preflight") || !r["preflight"].is_object()) return out;
  const json procs = r["preflight"].value("processes", json::array());
  for (const json& p : procs) {
    const json devices = p.value("devices", json::array());
    const std::string process =
        procs.size() > 1 ? "process " + std::to_string(p.value("pid", uint64_t{0})) + " " : "";
    for (const json& d : devices) {
      std::string who = process;
      if (devices.size() > 1) who += "device " + std::to_string(d.value("device", 0u)) + " ";
      const std::string head = "vramtrace: " + who + "pre-flight ";
      if (!d.value("predicted", false)) {
        out += head + "made no prediction: " + printable(d.value("error", std::string())) + "\n";
        continue;
      }
      const std::string predicted =
          "predicted " + human_bytes(d.value("predicted_reserved_peak_bytes", uint64_t{0})) +
          (p.value("loss", std::string()) == "program" ? " by the program's own loop" : "");
      if (!d.value("compared", false)) {
        out += head + predicted + " (reserved); not compared: " +
               printable(d.value("not_compared_because", std::string())) + "\n";
        continue;
      }
      char err[32];
      std::snprintf(err, sizeof err, "%+.1f %%", d.value("error_percent", 0.0));
      out += head + predicted + ", the step took " +
             human_bytes(d.value("recorded_reserved_peak_bytes", uint64_t{0})) + " (error " + err +
             "; PyTorch reserved, the first two iterations)\n";
    }
    for (const json& a : p.value("assumed", json::array()))
      if (a.is_string())
        out += "vramtrace: " + process + "pre-flight assumed " + printable(a.get<std::string>()) +
               "\n";
  }
  return out;
}

// Where the time after a first-step death went (the prediction at exit), as the collector says it.
std::string predicted_at_exit_lines(const json& r) {
  std::string out;
  const json& run = r[field::run];
  if (run.contains(field::predicted_at_exit))
    for (const auto& x : run[field::predicted_at_exit])
      out += "vramtrace: " + x[field::note].get<std::string>() + "\n";
  return out;
}

}  // namespace

std::string summary_text(const json& r) {
  std::string out;
  if (r[field::run].value(field::stand_in, false))
    out += "vramtrace: NOTE: recorded on the CPU stand-in for CUDA, not on a real GPU\n";
  out += not_profiled_lines(r);
  out += device_lines(r);
  out += oom_lines(r);
  out += diagnosis_lines(r);
  out += plan_lines(r);
  out += preflight_lines(r);
  out += rank_line(r);
  out += left_at_end_lines(r);
  out += predicted_at_exit_lines(r);
  out += growth_lines(r);
  out += warning_lines(r);
  return printable_lines(out);
}

}  // namespace vramtrace::report

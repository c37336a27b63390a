// The run's diagnosis: its moment, limit, cause, growth and remedies (see run_diagnosis.h).
#include "collector/analysis/run_diagnosis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "collector/analysis/analysis.h"
#include "common/bytes_text.h"

namespace vramtrace::collector {

namespace {

// The moment the diagnosis is about: the first fatal OOM, else the device whose peak came
// closest to its capacity (with no capacity known, the device with the largest peak).
struct Moment {
  const OomAnalysis* fatal = nullptr;
  size_t fatal_index = 0;  // its place among every process's OOMs, as report.json lists them
  const ProcessModel* process = nullptr;  // the last process of the OOM's pid
  size_t process_index = 0;
  const OomEvent* fatal_event = nullptr;  // that process's first fatal OOM on the device
  uint32_t device = 0;
};

// The device of the largest peak, for a run where no device's capacity is known.
void largest_peak(const std::vector<ProcessModel>& processes, Moment& m) {
  uint64_t best = 0;
  for (size_t i = 0; i < processes.size(); ++i)
    for (const auto& [index, d] : processes[i].devices)
      if (!m.process || d.footprint_peak > best) {
        best = d.footprint_peak;
        m.process = &processes[i];
        m.process_index = i;
        m.device = index;
      }
}

Moment moment_of(const RunAnalysis& a, Diagnosis& dg) {
  Moment m;
  size_t index = 0;
  for (const ProcessAnalysis& pa : a.processes)
    for (const OomAnalysis& o : pa.ooms) {
      if (o.event->fatal) {
        ++dg.fatal_ooms;
        if (!m.fatal) {
          m.fatal = &o;
          m.fatal_index = index;
        }
      } else {
        ++dg.recovered_ooms;
      }
      ++index;
    }
  dg.oom = m.fatal != nullptr;
  const std::vector<ProcessModel>& processes = a.run->processes;
  if (m.fatal) {
    for (size_t i = 0; i < processes.size(); ++i)
      if (processes[i].pid == m.fatal->event->pid) {
        m.process = &processes[i];
        m.process_index = i;
      }
    m.device = m.fatal->event->device;
    if (m.process)
      for (const auto& o : m.process->ooms)
        if (o.fatal && o.device == m.device && !m.fatal_event) m.fatal_event = &o;
    return m;
  }
  double best = -1;
  for (size_t i = 0; i < processes.size(); ++i)
    for (const auto& [index, d] : processes[i].devices)
      if (d.total_bytes) {
        double f = static_cast<double>(d.footprint_peak) / static_cast<double>(d.total_bytes);
        if (f > best) {
          best = f;
          m.process = &processes[i];
          m.process_index = i;
          m.device = index;
        }
      }
  if (!m.process) largest_peak(processes, m);
  return m;
}

// The fatal OOM's likeliest finding as the cause, its measured figures in bytes in words (in
// the order of their labels, as report.json has always listed them: evidence_items).
DiagnosisCause cause_of(const OomFinding& f) {
  DiagnosisCause c{finding_kind_name(f.kind), f.title, {}};
  for (const EvidenceItem& item : evidence_items(f))
    if (item.bytes) c.evidence.push_back({item.label, *item.bytes});
  return c;
}

bool fragmented(const OomAnalysis* fatal) {
  if (fatal)
    for (const OomFindingAtSites& f : fatal->findings)
      if (f.finding.kind == FindingKind::Fragmentation) return true;
  return false;
}

// A native program's remedy with the peak it leads to: the moment's `base` less its saving,
// unless it knows better.
RemedyOutcome outcome_of(const Remedy& r, uint64_t base) {
  return {r, r.predicted_peak ? *r.predicted_peak : base - std::min(base, r.saves_bytes),
          std::nullopt, ""};
}

// PyTorch's remedies, each replayed (collector/predict/whatif.h): its change of the run's requests
// (the unfinished first step completed where the hook predicted it) through the allocator's model
// under the run's own limit, and with no limit for what it needs against what the run needs.
class RemedyReplays {
 public:
  RemedyReplays(const ProcessModel& p, uint32_t device, std::unordered_set<size_t> kept)
      : p_(p), device_(device), kept_(std::move(kept)) {
    unlimited_.limit = UINT64_MAX;
    unlimited_.fraction_limit = UINT64_MAX;
    const WhatIfResult own = replay_run(p, device, unlimited_);
    if (own.ok) need_ = own.device_peak_bytes;
    if (const TorchMemory* tm = p.torch_memory.get())
      for (size_t i = 0; i < tm->info().size(); ++i)
        if (tm->info()[i].category == Category::Activations &&
            tm->info()[i].phase == TorchPhase::Evaluation)
          evaluation_.insert(i);
  }

  // It saves under 1 % of what the run needs, replayed (or, for one that cannot be, by its
  // estimate).
  bool saves_next_to_nothing(const RemedyOutcome& o) const {
    return need_ && o.remedy.saves_bytes < need_ / 100;
  }

  RemedyOutcome outcome(Remedy r) const {
    name_checkpointed_modules(r);
    RemedyChange change{r.kind, r.modules, {}};
    // The evaluation forwards' graphs (no_grad offered for them), else what the forwards keep
    // across iterations.
    change.kept_blocks = r.kind == RemedyKind::NoGrad && kept_.empty() ? evaluation_ : kept_;
    const WhatIfResult w = replay_remedy(p_, device_, change);
    r.predicted_peak_high.reset();
    r.upper_bound = false;
    if (!w.ok) {
      r.predicted_peak.reset();
      r.lower_bound = false;
      return {r, std::nullopt, std::nullopt, w.error};
    }
    const WhatIfResult needs = replay_remedy(p_, device_, change, unlimited_);
    // Under the limit PyTorch frees its cache and retries before it fails, so what fits may
    // peak lower than what it would take with no limit.
    const uint64_t figure = w.fits() || !needs.ok ? w.device_peak_bytes : needs.device_peak_bytes;
    if (needs.ok && need_)
      r.saves_bytes = need_ > needs.device_peak_bytes ? need_ - needs.device_peak_bytes : 0;
    r.predicted_peak = figure;
    // How large a batch fits, by replays; a job that died in its first step with nothing to
    // complete it keeps its advice to measure it.
    if (r.kind == RemedyKind::SmallerBatch && !r.leaves_growth && !(r.lower_bound && !w.completion))
      r.how = largest_batch(w.truncated_at_recorded_oom);
    // A run that died at its own OOM with no prediction of the rest: a floor.
    r.lower_bound = w.truncated_at_recorded_oom;
    RemedyReplay rp{w.fits(),
                    w.reserved_peak_bytes,
                    w.fraction_limit ? std::min(w.limit_bytes, *w.fraction_limit) : w.limit_bytes,
                    w.truncated_at_recorded_oom,
                    w.oom,
                    w.completion,
                    w.fake_step_change,
                    w.not_weighed_because};
    return {r, figure, rp, ""};
  }

 private:
  // Checkpointing weighed on the step the hook ran on fake tensors checkpoints the modules the
  // hook chose (the repeated blocks): the remedy names those.
  void name_checkpointed_modules(Remedy& r) const {
    if (r.kind != RemedyKind::ActivationCheckpointing || !p_.torch_context) return;
    const TorchContext& ctx = *p_.torch_context;
    const char* tag = fake_step_change(remedy_kind_row(r.kind).predicted_by);
    const TorchPredictedStep* st = predicted_change(ctx, device_, tag);
    if (!st || !predicted_change(ctx, device_, "")) return;
    std::vector<std::string> names;
    for (uint32_t id : st->modules)
      if (id && id <= ctx.modules.size()) names.push_back(ctx.modules[id - 1].name);
    if (names.empty()) return;
    r.title = "Checkpoint the model's repeated blocks: " + module_list_text(names);
    r.modules = std::move(names);
  }

  // The largest batch that fits the run's limit, by replays (what PyTorch does under pressure
  // included: its cache freed and the request retried).
  std::string largest_batch(bool truncated) const {
    const auto mb = max_batch_scale(p_, device_, {});
    const char* so_far = truncated ? " (as far as the run got)" : "";
    char buf[200];
    if (!mb)
      std::snprintf(buf, sizeof buf, "no batch fits the limit, replayed down to 1%% of this one%s",
                    so_far);
    else if (mb->scale < 1.0 && mb->at.completion && mb->at.completion->recorded_batch)
      // The hook knew the batch: the answer is a batch size, the plan's and the pre-flight's.
      std::snprintf(buf, sizeof buf,
                    "the largest batch that fits the limit, replayed, is %llu (this one: %llu)",
                    static_cast<unsigned long long>(
                        largest_batch_size(p_, device_, *mb, mb->at.completion->recorded_batch)),
                    static_cast<unsigned long long>(mb->at.completion->recorded_batch));
    else if (mb->scale < 1.0)
      std::snprintf(buf, sizeof buf,
                    "the largest batch that fits the limit, replayed, is %.0f%% of this one%s",
                    std::floor(mb->scale * 100.0), so_far);
    else
      std::snprintf(buf, sizeof buf, "this batch fits; replayed, up to %.2fx of it would%s",
                    mb->scale, so_far);
    return buf;
  }

  const ProcessModel& p_;
  uint32_t device_;
  std::unordered_set<size_t> kept_, evaluation_;
  WhatIfSettings unlimited_;
  uint64_t need_ = 0;  // the run's own replay with no limit: what it needs
};

// The diagnosis' growth, cause and remedies in CUDA's terms, for a program whose memory
// PyTorch's allocator trace does not explain (a native program; with `remedies_too` false,
// PyTorch without its trace, whose remedies come from its categories).
void native_diagnosis(Diagnosis& dg, const SiteGrowth* growth, const Moment& m, uint64_t peak,
                      bool remedies_too) {
  NativeRemedyInput nin;
  if (growth) {
    nin.growth_site = growth->site;
    nin.grown_bytes = growth->bytes;
    nin.bytes_per_iteration = growth->bytes_per_iteration;
    if (!dg.cause)
      dg.cause = DiagnosisCause{
          "growth",
          "Live memory grows by " + human_bytes(nin.bytes_per_iteration) +
              " per iteration, kept at " + nin.growth_site,
          {{"growth per iteration", nin.bytes_per_iteration}, {"grown in all", nin.grown_bytes}}};
    dg.growth = DiagnosisGrowth{"growth", nin.bytes_per_iteration, nin.grown_bytes, std::nullopt};
  }
  nin.peak = peak;
  if (m.fatal) {
    nin.needed = dg.held_bytes + dg.requested_bytes;
    nin.limit = dg.limit.bytes;
    nin.fragmented = fragmented(m.fatal);
  }
  if (remedies_too && (growth || m.fatal)) {
    const uint64_t base = m.fatal ? dg.held_bytes + dg.requested_bytes : peak;
    dg.remedies.emplace();
    for (const auto& r : native_remedies(nin)) dg.remedies->push_back(outcome_of(r, base));
  }
}

// JAX: the pool's limit, what the arrays needed at their peak, and the knob that moves it.
void xla_diagnosis(Diagnosis& dg, const XlaPool& x, uint64_t device_total) {
  dg.remedies.emplace();
  const uint64_t want = std::max(x.peak_in_use, x.in_use) + dg.requested_bytes;
  if (device_total && x.limit < device_total * 9 / 10 && want > x.limit) {
    Remedy r;
    r.kind = RemedyKind::XlaFraction;
    r.title = "Give XLA's pool more of the GPU";
    r.saves_bytes = device_total * 95 / 100 - x.limit;
    r.assumption = "the GPU is not shared with another process";
    r.how = "XLA_PYTHON_CLIENT_MEM_FRACTION=.95";
    dg.remedies->push_back({r, std::nullopt, std::nullopt, ""});
  }
  dg.xla_pool = Diagnosis::XlaFigures{x.peak_in_use, x.limit};
}

// PyTorch with its allocator trace: the categories of the moment, memory kept across
// iterations (the cause, and the remedies that stop it first) or a growing site, then the
// remedies the categories support.
void pytorch_diagnosis(Diagnosis& dg, const RunAnalysis& a, const Moment& m,
                       const SiteGrowth* growth) {
  const ProcessModel& proc = *m.process;
  const DeviceModel& d = proc.devices.at(m.device);
  const TorchMemory& tm = *proc.torch_memory;
  // The categories of the moment, from the collector as the OOM's and the peak's own are.
  StackResolver& stacks = *a.stacks[m.process_index];
  CategoryBytes at{};
  uint64_t t = 0;
  if (m.fatal_event) {
    at = categories_at_oom(tm, *m.fatal_event, &stacks);
    t = m.fatal_event->time_ns;
  } else {
    const PeakMoment pm = peak_moment_of(tm, d);
    at = categories_at_peak(tm, d, pm, &stacks);
    t = pm.time_ns;
  }
  RemedyInput in =
      remedy_input(tm, m.device, t, at, dg.limit.bytes, dg.requested_bytes, fragmented(m.fatal));
  if (in.partial_step) {
    in.progress = first_step_progress(tm, t);
    for (const std::string& w : proc.cmdline) in.command += (in.command.empty() ? "" : " ") + w;
  }
  // Memory the forwards keep across iterations: the cause, and the remedies that stop it first;
  // the others (a smaller batch, bf16, checkpointing) only delay the same end.
  const auto kept = kept_across_iterations(tm, m.device, t);
  std::vector<Remedy> ranked;
  if (kept) {
    // Beyond its blocks the process held the allocator's cache, the context and libraries.
    const uint64_t held_now = m.fatal ? in.total : d.memory.peak_bytes();
    ranked = kept_remedies(*kept, held_now > kept->in_use ? held_now - kept->in_use : 0);
    if (!dg.cause)
      dg.cause = DiagnosisCause{kept_kind_name(kept->kind),
                                kept_title(*kept),
                                {{"kept per iteration", kept->bytes_per_iteration},
                                 {"kept from earlier iterations", kept->kept_bytes}}};
    dg.growth = DiagnosisGrowth{kept_kind_name(kept->kind), kept->bytes_per_iteration,
                                kept->kept_bytes, kept->iterations_keeping};
  } else if (growth) {
    ranked.push_back(growth_remedy(growth->site, growth->bytes_per_iteration, growth->bytes));
    dg.growth = DiagnosisGrowth{"growth", growth->bytes_per_iteration, growth->bytes, std::nullopt};
  }
  const bool growing = !ranked.empty();
  const size_t stops_growth = ranked.size();
  for (auto r : pytorch_remedies(in)) {
    if (kept && kept->kind == KeptKind::Graph && r.kind == RemedyKind::NoGrad) continue;
    r.leaves_growth = growing;
    // How large a batch fits means nothing while every iteration keeps more.
    if (growing && r.kind == RemedyKind::SmallerBatch)
      r.how = "only delays the end: each iteration still keeps memory that the next one adds to";
    ranked.push_back(std::move(r));
  }
  // Each remedy's figure is its replay's.
  std::unordered_set<size_t> kept_blocks;
  if (kept) kept_blocks.insert(kept->blocks.begin(), kept->blocks.end());
  const RemedyReplays replays(proc, m.device, std::move(kept_blocks));
  dg.remedies.emplace();
  for (size_t i = 0; i < ranked.size(); ++i) {
    RemedyOutcome o = replays.outcome(std::move(ranked[i]));
    // A remedy whose replay saves next to nothing is not advice (a launch-bound step whose
    // peak is cuBLAS's workspaces gains nothing from bf16 or a smaller batch).
    if (i >= stops_growth && replays.saves_next_to_nothing(o)) continue;
    dg.remedies->push_back(std::move(o));
  }
  // Largest replayed saving first, after the remedies that stop memory kept across iterations.
  const auto first = dg.remedies->begin() + static_cast<std::ptrdiff_t>(stops_growth);
  std::stable_sort(first, dg.remedies->end(), [](const RemedyOutcome& a, const RemedyOutcome& b) {
    return a.remedy.saves_bytes > b.remedy.saves_bytes;
  });
  dg.categories = in.at;
}

// What to try where no remedy was looked for (PyTorch without its allocator trace): the fatal
// OOM's findings' advice, worded for the program by oom_findings.cpp.
void findings_remedies(Diagnosis& dg, const OomAnalysis& fatal) {
  dg.remedies.emplace();
  for (const OomFindingAtSites& f : fatal.findings)
    if (!f.finding.suggestion.empty()) {
      Remedy r;
      r.kind = RemedyKind::FindingAdvice;
      r.finding = finding_kind_name(f.finding.kind);
      r.title = f.finding.suggestion;
      dg.remedies->push_back({r, std::nullopt, std::nullopt, ""});
    }
}

// The diagnosis of the moment's process and device: its limit, cause, growth and remedies.
void diagnose(Diagnosis& dg, const RunAnalysis& a, const Moment& m) {
  const ProcessModel& proc = *m.process;
  const auto& d = proc.devices.at(m.device);
  const TorchMemory* tm = proc.torch_memory.get();
  dg.device = m.device;
  dg.pid = proc.pid;
  dg.held_bytes = m.fatal ? m.fatal->event->live_bytes : d.footprint_peak;
  // No capacity known, and no OOM: the device is named, against no limit.
  if (!m.fatal && !d.total_bytes) return;
  const std::optional<uint64_t> others = m.fatal ? m.fatal->held_by_others : std::nullopt;
  dg.limit = effective_limit(d.total_bytes, tm, m.device, others);
  dg.requested_bytes = m.fatal ? m.fatal->event->requested_bytes : 0;
  dg.headroom_bytes = static_cast<int64_t>(dg.limit.bytes) - static_cast<int64_t>(dg.held_bytes);
  // The cause: the fatal OOM's first finding, else (no OOM) none yet.
  if (m.fatal && !m.fatal->findings.empty()) dg.cause = cause_of(m.fatal->findings[0].finding);
  // Growth seen on this device (the run's growth, each device's fastest first), if any.
  const SiteGrowth* growth = nullptr;
  for (const GrowthOnDevice& g : a.growth)
    if (g.pid == proc.pid && g.device == m.device) {
      growth = &g.growth.growth;
      break;
    }
  if (!tm || tm->context().blocks.empty()) {
    native_diagnosis(dg, growth, m, d.memory.peak_bytes(), !tm);
    if (!tm) return;
  }
  if (auto x = tm->context().xla.find(m.device); x != tm->context().xla.end()) {
    xla_diagnosis(dg, x->second, d.total_bytes);
    return;
  }
  if (tm->context().blocks.empty()) return;
  pytorch_diagnosis(dg, a, m, growth);
}

}  // namespace

Diagnosis diagnosis_of(const RunAnalysis& a) {
  Diagnosis dg;
  const Moment m = moment_of(a, dg);
  if (m.fatal) {
    dg.oom_index = m.fatal_index;
    dg.oom_fatal = m.fatal->event->fatal;
    const OomEvent& e = *m.fatal->event;
    dg.asked_bytes = e.allocator ? e.allocator_request : e.requested_bytes;
    for (const ProcessAnalysis& pa : a.processes)
      for (const OomAnalysis& o : pa.ooms)
        if (o.event->device == e.device && !o.event->recovered) ++dg.ooms_on_device;
  }
  if (!m.process || !m.process->devices.count(m.device)) return dg;
  diagnose(dg, a, m);
  if (!dg.remedies && m.fatal) findings_remedies(dg, *m.fatal);
  return dg;
}

std::string module_list_text(const std::vector<std::string>& names) {
  // "prefix" + a number each, the numbers counting up by one from the first.
  auto split = [](const std::string& n) -> std::pair<std::string, std::optional<uint64_t>> {
    size_t i = n.size();
    while (i > 0 && n[i - 1] >= '0' && n[i - 1] <= '9') --i;
    if (i == n.size() || n.size() - i > 9 || (n.size() - i > 1 && n[i] == '0')) return {n, {}};
    return {n.substr(0, i), std::stoull(n.substr(i))};
  };
  if (names.empty()) return "";
  bool run = names.size() >= 3;
  const auto first = split(names.front());
  for (size_t k = 0; run && k < names.size(); ++k) {
    const auto [prefix, number] = split(names[k]);
    run = number && first.second && prefix == first.first && *number == *first.second + k;
  }
  if (run)
    return names.front() + " to " + names.back() + " (" + std::to_string(names.size()) + " blocks)";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

std::string outcome_text(const RemedyOutcome& o) {
  const Remedy& r = o.remedy;
  const std::string grows = r.leaves_growth ? "; memory still grows every iteration" : "";
  const auto& w = o.replayed;
  if (o.predicted_peak && r.predicted_peak_high)
    return "peak with it: between " + human_bytes(*o.predicted_peak) + " and " +
           human_bytes(*r.predicted_peak_high) + grows;
  if (o.predicted_peak) {
    // A floor when the job died in its first step, a ceiling where only the most it can need
    // is known; a replay's own figure; else an estimate.
    std::string out = std::string("peak with it: ") +
                      (r.lower_bound   ? "at least "
                       : r.upper_bound ? "at most "
                       : w             ? ""
                                       : "about ") +
                      human_bytes(*o.predicted_peak);
    if (w) {
      out += "; replayed through PyTorch's allocator: ";
      if (w->fits)
        out += "fits under " + human_bytes(w->limit_bytes) +
               (w->up_to_recorded_oom ? " as far as the run got" : "");
      else if (!w->oom)
        out += "over the limit";
      else
        out += "runs out at a " + human_bytes(w->oom->requested_bytes) + " request" +
               (w->oom->module.empty() ? "" : " in " + w->oom->module);
      if (w->completion)
        out += "; the step the run never finished is predicted (" +
               std::to_string(w->completion->predicted_requests) + " requests)";
      if (w->fake_step_change)
        out += "; its effect weighed on the step run on fake tensors with it and without it";
      else if (!w->not_weighed_because.empty())
        out += "; estimated from the recorded requests, " + w->not_weighed_because;
    }
    return out + grows;
  }
  if (!o.not_replayed.empty()) return "not replayed: " + o.not_replayed + grows;
  return r.leaves_growth ? "memory still grows every iteration" : "";
}

}  // namespace vramtrace::collector

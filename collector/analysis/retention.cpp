// Memory a PyTorch program keeps across iterations, and its fixes (see retention.h).
#include "collector/analysis/retention.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "common/bytes_text.h"

namespace vramtrace::collector {
namespace {

// Below this an iteration's leftovers are noise (a running metric, a cached index tensor).
constexpr uint64_t kMinKeptPerIteration = 1ull << 20;
// An evaluation that dies in its third forward has one iteration to judge by: it must keep
// at least this much, and most of what its forward made, to be called a kept graph.
constexpr uint64_t kMinKeptSingle = 64ull << 20;

bool forward_made(const BlockInfo& b) {
  return (b.phase == TorchPhase::Forward || b.phase == TorchPhase::Evaluation) && b.label < 0 &&
         b.iteration >= 0;
}

// The most PyTorch's blocks in use reached up to `t` without what the forwards of iterations
// `lag` or more back still held (see KeptAcrossIterations::peak_without_kept).
// What each iteration's forward made from its last module call on (its outputs: logits, a
// loss), as a flag per block. The hook marks module calls only in some iterations; in the
// others the same count of the forward's allocations stands in (as TorchMemory's templates
// align modules).
std::vector<bool> forward_tails(const TorchMemory& tm, uint32_t device, uint64_t t) {
  const auto& blocks = tm.context().blocks;
  const auto& info = tm.info();
  std::map<int64_t, uint64_t> tail_from;  // iteration -> its last module call's start
  std::map<int64_t, bool> traced;
  const PhaseSpan* fwd = nullptr;
  for (const TorchMark& m : tm.context().marks) {
    if (m.time_ns > t) break;
    const PhaseSpan* ph = tm.phase_at(m.time_ns);
    if (!ph || (ph->phase != TorchPhase::Forward && ph->phase != TorchPhase::Evaluation)) continue;
    if (ph != fwd && tail_from.count(ph->iteration)) continue;  // a later forward of it
    fwd = ph;
    if (m.kind == MarkKind::Module) traced[ph->iteration] = true;
    if (m.kind == MarkKind::Module || !tail_from.count(ph->iteration))
      tail_from[ph->iteration] = m.time_ns;
  }
  std::vector<bool> tail(blocks.size(), false);
  std::map<int64_t, size_t> made;     // forward-made blocks of each iteration so far
  std::map<int64_t, size_t> tail_at;  // traced iterations: the count made before the tail
  size_t last_tail_at = SIZE_MAX;
  int64_t last_it = -1;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].device != device || blocks[i].alloc_ns > t || !forward_made(info[i])) continue;
    const int64_t it = info[i].iteration;
    if (it != last_it && last_it >= 0 && traced.count(last_it)) last_tail_at = tail_at[last_it];
    last_it = it;
    const size_t pos = made[it]++;
    if (traced.count(it)) {
      if (blocks[i].alloc_ns < tail_from[it]) tail_at[it] = pos + 1;
      tail[i] = blocks[i].alloc_ns >= tail_from[it];
    } else {
      tail[i] = last_tail_at != SIZE_MAX && pos >= last_tail_at;
    }
  }
  return tail;
}

// The most PyTorch's blocks in use reached up to `t` had a fix not kept some of the forwards'
// blocks live, for each fix at once (see KeptAcrossIterations), and what they were at `t`. One
// sweep: each iteration's live forward-made bytes in three parts, activations and temporaries
// before its last module call and its outputs after; and two running sums of whole iterations,
// those before the current one and those before the previous one.
struct PeaksWithout {
  uint64_t in_use = 0;
  uint64_t earlier = 0;              // everything earlier iterations' forwards made
  uint64_t older_than_previous = 0;  // of iterations before the previous one
  uint64_t earlier_but_outputs = 0;  // as `earlier`, but the previous forward's outputs until
                                     // the current forward returns
  uint64_t graphs = 0;  // no autograd: as earlier_but_outputs, and the current forward's
                        // activations (what it saved for backward)
};

PeaksWithout peaks_without(const TorchMemory& tm, uint32_t device, uint64_t t) {
  const auto& blocks = tm.context().blocks;
  const auto& info = tm.info();
  const std::vector<bool> tail = forward_tails(tm, device, t);
  std::vector<std::pair<uint64_t, int64_t>> events;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].device != device || blocks[i].alloc_ns > t) continue;
    events.push_back({blocks[i].alloc_ns, static_cast<int64_t>(i) + 1});
    if (blocks[i].free_ns <= t) events.push_back({blocks[i].free_ns, -static_cast<int64_t>(i) - 1});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  enum { kActivations, kTemporaries, kOutputs };
  std::map<int64_t, std::array<int64_t, 3>> live;  // by iteration
  auto part = [&](size_t i) {
    return tail[i]                                     ? kOutputs
           : info[i].category == Category::Activations ? kActivations
                                                       : kTemporaries;
  };
  // When each iteration's first forward returned: the previous outputs go then (`out` rebound).
  std::map<int64_t, uint64_t> forward_end;
  for (const PhaseSpan& ph : tm.phases())
    if ((ph.phase == TorchPhase::Forward || ph.phase == TorchPhase::Evaluation) &&
        !forward_end.count(ph.iteration))
      forward_end[ph.iteration] = ph.end_ns;
  // The live bytes of every iteration up to `to` (inclusive), kept as a running sum: [0] up to
  // the iteration before the current one, [1] up to the one before the previous.
  struct Old {
    int64_t bytes = 0, to = -1;
  } old[2];
  int64_t in_use = 0, best[4] = {0, 0, 0, 0};
  for (const auto& [time, e] : events) {
    const size_t i = static_cast<size_t>((e > 0 ? e : -e) - 1);
    const int64_t sign = e > 0 ? 1 : -1, bytes = sign * static_cast<int64_t>(blocks[i].bytes);
    in_use += bytes;
    const int64_t now = tm.iteration_at(time);
    for (int64_t lag = 1; lag <= 2; ++lag)
      for (Old& o = old[lag - 1]; o.to < now - lag; ++o.to) {
        const auto& l = live[o.to + 1];
        o.bytes += l[0] + l[1] + l[2];
      }
    if (forward_made(info[i])) {
      live[info[i].iteration][part(i)] += bytes;
      for (Old& o : old)
        if (info[i].iteration <= o.to) o.bytes += bytes;
    }
    const auto& prev = live[now - 1];
    auto end = forward_end.find(now);
    const int64_t but_outputs =
        old[1].bytes + prev[kActivations] + prev[kTemporaries] +
        (end != forward_end.end() && time > end->second ? prev[kOutputs] : 0);
    const int64_t away[4] = {old[0].bytes, old[1].bytes, but_outputs,
                             but_outputs + live[now][kActivations]};
    for (int k = 0; k < 4; ++k) best[k] = std::max(best[k], in_use - away[k]);
  }
  auto bytes = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  return {bytes(in_use), bytes(best[0]), bytes(best[1]), bytes(best[2]), bytes(best[3])};
}

// A carried state in the iterations [first, judged): the outermost module whose forwards most
// often got their previous forward's outputs back (the hook's FedBack marks), when they did in
// at least half the iterations that kept memory.
void find_carried_state(const TorchMemory& tm, int64_t first, int64_t judged, int64_t keeping,
                        KeptAcrossIterations& k) {
  std::map<uint32_t, std::set<int64_t>> iterations;  // module -> iterations it was fed back in
  std::map<uint32_t, uint32_t> tensors;
  for (const TorchMark& m : tm.context().marks) {
    if (m.kind != MarkKind::FedBack) continue;
    const int64_t it = tm.iteration_at(m.time_ns);
    // The forward of iteration i + 1 is the one that got iteration i's state back.
    if (it <= first || it > judged) continue;
    iterations[m.id].insert(it);
    tensors[m.id] = std::max<uint32_t>(tensors[m.id], m.fed_back);
  }
  uint32_t best = 0;
  size_t best_n = 0;
  for (const auto& [module, its] : iterations)
    if (its.size() > best_n) {
      best = module;
      best_n = its.size();
    }
  if (!best || static_cast<int64_t>(best_n) * 2 < keeping) return;
  k.carried_state = true;
  k.state_module = tm.module_name(best);
  const auto& modules = tm.context().modules;
  if (best <= modules.size()) k.state_type = modules[best - 1].type;
  k.state_tensors = tensors[best];
  for (const TorchModule& m : modules)
    if (m.type.find("LSTM") != std::string::npos) k.state_lstm = true;
}

}  // namespace

const char* kept_kind_name(KeptKind k) {
  return k == KeptKind::Graph ? "kept_graph" : "kept_outputs";
}

std::optional<KeptAcrossIterations> kept_across_iterations(const TorchMemory& tm, uint32_t device,
                                                           uint64_t t) {
  const auto& starts = tm.iterations();
  const int64_t begun = tm.iteration_at(t) + 1;
  // Iterations i with i + 2 begun by `t` are judged; the one right before the current may
  // still hold its predecessor's output legitimately, but what it keeps is given back by the
  // fix all the same.
  const int64_t judged = begun - 2;
  if (judged < 1) return std::nullopt;
  const auto& blocks = tm.context().blocks;
  const auto& info = tm.info();
  std::vector<uint64_t> made(static_cast<size_t>(begun), 0), kept(static_cast<size_t>(begun), 0);
  std::vector<std::set<uint32_t>> kept_modules(static_cast<size_t>(begun));
  std::map<uint32_t, uint64_t> by_module;
  std::vector<bool> eval(static_cast<size_t>(begun), false);
  const std::vector<bool> tail = forward_tails(tm, device, t);
  KeptAcrossIterations k;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const TorchBlock& b = blocks[i];
    const BlockInfo& bi = info[i];
    if (b.device != device || b.alloc_ns > t || !forward_made(bi) || bi.iteration >= begun)
      continue;
    const auto it = static_cast<size_t>(bi.iteration);
    made[it] += b.bytes;
    if (bi.phase == TorchPhase::Evaluation) eval[it] = true;
    if (b.free_ns <= t || bi.iteration > begun - 2) continue;
    kept[it] += b.bytes;
    if (bi.category == Category::Activations && !tail[i]) k.kept_activations += b.bytes;
    kept_modules[it].insert(bi.module);
    by_module[bi.module] += b.bytes;
    k.kept_bytes += b.bytes;
    k.blocks.push_back(i);
  }
  std::vector<uint64_t> keeping;
  int64_t first = -1;
  bool graph_like = true;
  for (int64_t it = 0; it < judged; ++it) {
    const auto i = static_cast<size_t>(it);
    if (kept[i] < kMinKeptPerIteration) continue;
    keeping.push_back(kept[i]);
    if (first < 0) first = it;
    // A graph keeps nearly everything its forward made, across the model; outputs are a
    // few tensors of the last modules.
    if (kept_modules[i].size() < 3 && kept[i] * 2 < made[i]) graph_like = false;
  }
  if (keeping.empty()) return std::nullopt;
  if (judged == 1) {
    if (kept[0] < kMinKeptSingle || kept[0] * 2 < made[0]) return std::nullopt;
  } else if (keeping.size() < 2 || static_cast<int64_t>(keeping.size()) * 2 < judged) {
    return std::nullopt;
  }
  std::sort(keeping.begin(), keeping.end());
  k.bytes_per_iteration = keeping[keeping.size() / 2];
  k.iterations_keeping = static_cast<int64_t>(keeping.size());
  k.iterations = begun;
  k.first_iteration = first;
  // A backward in the iterations judged: the graph was consumed, what stayed is outputs.
  const uint64_t from = starts[static_cast<size_t>(first)];
  const uint64_t until = starts[static_cast<size_t>(begun - 1)];
  uint32_t site = 0;
  for (const PhaseSpan& ph : tm.phases()) {
    if (ph.start_ns < from || ph.start_ns > until) continue;
    if (ph.phase == TorchPhase::Backward) k.backward = true;
    if ((ph.phase == TorchPhase::Forward || ph.phase == TorchPhase::Evaluation) && !site)
      site = ph.site;
  }
  for (int64_t it = first; it < judged; ++it)
    if (eval[static_cast<size_t>(it)]) k.evaluation = true;
  find_carried_state(tm, first, judged, k.iterations_keeping, k);
  // Without a backward, memory kept that is mostly what autograd saved (activations, not the
  // forwards' outputs) is a graph kept alive, however few modules made it (one LSTM whose state
  // is fed back): no_grad would not have made it.
  const bool saved = k.kept_activations * 2 >= k.kept_bytes;
  k.kind = !k.backward && (graph_like || saved) ? KeptKind::Graph : KeptKind::Outputs;
  k.site = tm.site_text(site);
  for (auto& [m, bytes] : by_module) {
    std::string name = tm.module_name(m);
    k.modules.emplace_back(name.empty() ? "(outside any module)" : name, bytes);
  }
  std::stable_sort(k.modules.begin(), k.modules.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const PeaksWithout peaks = peaks_without(tm, device, t);
  k.in_use = peaks.in_use;
  k.peak_without_kept = peaks.earlier;
  k.peak_keeping_previous = peaks.older_than_previous;
  k.peak_one_graph = peaks.earlier_but_outputs;
  k.peak_without_graphs = peaks.graphs;
  return k;
}

std::vector<Allocation> take_kept(const TorchMemory& tm, const KeptAcrossIterations& k,
                                  uint32_t device, std::vector<Allocation>& suspects) {
  const std::set<size_t> kept(k.blocks.begin(), k.blocks.end());
  const BlockInfo* first = tm.info().data();
  std::vector<Allocation> out, rest;
  for (Allocation& a : suspects) {
    const BlockInfo* b = a.space == 1 ? tm.block(device, a.id, a.time_ns) : nullptr;
    if (b && kept.count(static_cast<size_t>(b - first)))
      out.push_back(a);
    else
      rest.push_back(a);
  }
  suspects.swap(rest);
  return out;
}

namespace {

// "LSTM (rnn)", "the model" when the hook did not name it.
std::string state_owner(const KeptAcrossIterations& k) {
  if (k.state_type.empty()) return k.state_module.empty() ? "the model" : k.state_module;
  if (k.state_module.empty() || k.state_module == k.state_type) return k.state_type;
  return k.state_type + " (" + k.state_module + ")";
}

// The line that detaches the state, in the shape the run showed: one tensor fed back, two
// in a model with an LSTM (its (h, c)), or a tuple of them.
std::string detach_line(const KeptAcrossIterations& k) {
  if (k.state_tensors == 1) return "state = state.detach()";
  if (k.state_tensors == 2 && k.state_lstm) return "h, c = h.detach(), c.detach()";
  return "state = tuple(s.detach() for s in state)";
}

std::string carried_title(const KeptAcrossIterations& k, const std::string& at,
                          const std::string& per) {
  const std::string from = human_bytes(k.kept_bytes) + " kept from " +
                           std::to_string(k.iterations_keeping) + " earlier iteration" +
                           (k.iterations_keeping == 1 ? "" : "s");
  const std::string fed =
      "The state " + state_owner(k) + " returns is fed back into its next forward" + at;
  if (k.kind == KeptKind::Graph)
    return fed + ", and with autograd on it keeps every earlier forward's graph alive: " + per +
           " of activations that no backward consumed, " + from;
  return fed + " and keeps what each forward made: " + per + ", " + from;
}

}  // namespace

std::string kept_title(const KeptAcrossIterations& k) {
  const std::string at = k.site.empty() ? "" : " (called at " + k.site + ")";
  const std::string per = human_bytes(k.bytes_per_iteration) + " per iteration";
  if (k.carried_state) return carried_title(k, at, per);
  if (k.kind == KeptKind::Graph)
    return std::string("Each ") + (k.evaluation ? "evaluation " : "") +
           "forward's autograd graph stays alive: " + per + " of activations that no backward " +
           "consumed" + at + ", " + human_bytes(k.kept_bytes) + " kept from " +
           std::to_string(k.iterations_keeping) + " earlier iteration" +
           (k.iterations_keeping == 1 ? "" : "s");
  std::string lead = k.modules.empty() ? "" : " (made by " + k.modules[0].first + ")";
  return "Outputs of each forward" + lead + " are kept past their step" + at + ": " + per + ", " +
         human_bytes(k.kept_bytes) + " kept from " + std::to_string(k.iterations_keeping) +
         " earlier iteration" + (k.iterations_keeping == 1 ? "" : "s");
}

Remedy growth_remedy(const std::string& site, uint64_t bytes_per_iteration, uint64_t grown_bytes) {
  return {RemedyKind::KeepNumbers,
          "Don't keep tensors across iterations: " + site + " keeps " +
              human_bytes(bytes_per_iteration) + " per iteration",
          grown_bytes,
          "what an iteration keeps is only read later: as numbers or on the CPU it needs no GPU "
          "memory",
          "loss.item(), t.detach().cpu(), or clear the list or cache each iteration"};
}

namespace {

// A carried state's fixes: detach it between forwards (what truncated backpropagation through
// time does in training), or, when its graph is autograd's and no backward uses it, no_grad.
std::vector<Remedy> carried_state_remedies(const KeptAcrossIterations& k, uint64_t overhead) {
  std::vector<Remedy> out;
  Remedy detach{RemedyKind::DetachState,
                "Detach the state " + state_owner(k) + " returns before its next forward",
                k.kept_bytes,
                "the state " + state_owner(k) +
                    " returns goes back into its next forward; detached, it carries its values "
                    "but not the graph that made them, so each forward's graph goes when the "
                    "forward is done with",
                detach_line(k) + "   # after each forward, before the next"};
  // The previous forward's graph lives on while its outputs are bound (until the next forward
  // returns): at most what keeping only the previous iteration's memory reaches.
  detach.predicted_peak = k.peak_one_graph + overhead;
  if (k.peak_keeping_previous > k.peak_one_graph)
    detach.predicted_peak_high = k.peak_keeping_previous + overhead;
  out.push_back(std::move(detach));
  if (k.kind == KeptKind::Graph) {
    Remedy none = no_grad_remedy(NoGradFor::CarriedState, k.kept_bytes, k.kept_activations);
    none.predicted_peak = k.peak_without_graphs + overhead;
    if (k.peak_one_graph > k.peak_without_graphs)
      none.predicted_peak_high = k.peak_one_graph + overhead;
    out.push_back(std::move(none));
  }
  return out;
}

}  // namespace

std::vector<Remedy> kept_remedies(const KeptAcrossIterations& k, uint64_t overhead) {
  if (k.carried_state) return carried_state_remedies(k, overhead);
  std::vector<Remedy> out;
  if (k.kind == KeptKind::Graph) {
    out.push_back(no_grad_remedy(NoGradFor::KeptGraphs, k.kept_bytes));
    out.push_back({RemedyKind::AccumulateNumbers,
                   "Accumulate Python numbers, not tensors: total += loss.item() (or "
                   "loss.detach())",
                   k.kept_bytes,
                   "a loss kept as a tensor (a sum, a list) holds its whole graph alive",
                   "total += out.loss.item()   # or losses.append(loss.detach())"});
    // Without autograd no forward keeps a graph: at least the blocks without any graph (each op's
    // inputs still live while it runs come on top), at most a forward with its own graph, as
    // this run's ran with nothing kept from before. With numbers accumulated but autograd on,
    // `out` still holds one graph while the next forward runs.
    out[0].predicted_peak = k.peak_without_graphs + overhead;
    out[0].predicted_peak_high = k.peak_one_graph + overhead;
    out[1].predicted_peak = k.peak_keeping_previous + overhead;
    out[1].saves_bytes =
        k.in_use > k.peak_keeping_previous ? k.in_use - k.peak_keeping_previous : 0;
  } else {
    out.push_back({RemedyKind::DetachOutputs,
                   "Don't keep outputs on the GPU: store out.detach().cpu(), or compute the "
                   "metric inside the step",
                   k.kept_bytes,
                   "the tensors kept each step are only read later, so they can live on the CPU "
                   "or be reduced at once",
                   "kept.append(out.logits.detach().cpu())   # or metric.update(out.logits)"});
    // The previous step's outputs stay live until the next forward returns (`out` is rebound
    // then), whether the list keeps them or not.
    out[0].predicted_peak = k.peak_one_graph + overhead;
  }
  return out;
}

}  // namespace vramtrace::collector

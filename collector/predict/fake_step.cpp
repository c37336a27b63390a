// A step the hook ran on fake tensors with a remedy's change (bf16 autocast, checkpointing),
// as the engine replays it to weigh the change: after what the run recorded before the step,
// with the run's own workspaces put in where they came (see request_stream.h).
#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "collector/predict/predicted_request.h"
#include "collector/predict/request_stream.h"

namespace vramtrace::collector {

const TorchPredictedStep* predicted_change(const TorchContext& ctx, uint32_t device,
                                           const std::string& change) {
  const TorchPredictedStep* reference = nullptr;  // "none", else the completion at its batch
  for (const auto& st : ctx.predicted_steps) {
    if (st.device != device || st.status != "ok" || st.requests.empty()) continue;
    if (st.change == change) return &st;
    if (change.empty() && st.change == "none") reference = &st;
    if (change.empty() && st.change.empty() && st.batch == st.recorded_batch && !reference)
      reference = &st;
  }
  return change.empty() ? reference : nullptr;
}

namespace {

constexpr size_t kNone = SIZE_MAX;

// A request of the run that fake tensors do not see (a cuDNN convolution's or cuBLAS's
// workspace), placed by the reference step's mallocs: made after reference request `after`
// (kNone: before the first) and freed after reference request `freed_after` (kNone: at the
// step's end).
struct Workspace {
  Request malloc;
  std::optional<Request> free;
  size_t after = kNone, freed_after = kNone;
};

// Aligned alike only when nearly all of a step's mallocs were found: below this the two
// streams are not the same program's (a fused kernel where fake tensors decompose, another
// dtype) and the run's leftovers would not be workspaces.
constexpr double kAlignedShare = 0.9;
bool mostly_found(size_t found, size_t mallocs) {
  return mallocs > 0 && static_cast<double>(found) >= kAlignedShare * static_cast<double>(mallocs);
}

// The run's requests from the step's start, aligned in order with the reference step's mallocs
// (the same bytes, looking a few mallocs ahead: a workspace may have an activation's size, and
// a longer look would take it for one further on); those that match none are the workspaces.
// Empty when less than kAlignedShare of the reference's mallocs were found.
std::vector<Workspace> workspaces_of(const RequestStream& run,
                                     const TorchPredictedStep& reference) {
  constexpr size_t kLookAhead = 32;
  const auto& ref = reference.requests;
  std::vector<Workspace> out;
  std::unordered_map<uint32_t, size_t> open;  // recorded block -> index in `out`
  size_t j = 0, last = kNone, found = 0, mallocs = 0;
  std::vector<uint64_t> sizes(ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    mallocs += !ref[k].free;
    sizes[k] = ref[k].free ? MallocWindow::kFree : ref[k].bytes;
  }
  MallocWindow window(sizes, kLookAhead);
  for (const Request& q : run.requests) {
    if (q.predicted || q.time_ns < reference.time_ns || q.op == RequestOp::RecordedOom) continue;
    if (q.op == RequestOp::Free) {
      if (auto it = open.find(q.block); it != open.end()) {
        out[it->second].free = q;
        out[it->second].freed_after = last;
        open.erase(it);
      }
      continue;
    }
    if (j >= ref.size()) {
      if (open.empty()) break;  // the reference step is over: its workspaces' frees only
      continue;
    }
    const size_t k = window.find(j, q.bytes);
    if (k != SIZE_MAX) {
      last = k;
      j = k + 1;
      ++found;
    } else {
      open[q.block] = out.size();
      out.push_back({q, std::nullopt, last, kNone});
    }
  }
  if (!mostly_found(found, mallocs)) out.clear();
  return out;
}

// Which request of `changed` each malloc of `reference` is (kNone: none): the same bytes,
// module and phase, in order, looking ahead past what the change put in between (a whole
// block's recompute: ResNet-50's layer3 makes 76 requests). Empty when less than kAlignedShare
// of the reference's mallocs were found.
std::vector<size_t> changed_index(const TorchPredictedStep& reference,
                                  const TorchPredictedStep& changed) {
  constexpr size_t kLookAhead = 1024;
  const auto &ref = reference.requests, &ch = changed.requests;
  std::vector<size_t> out(ref.size(), kNone);
  size_t j = 0, found = 0, mallocs = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].free) continue;
    ++mallocs;
    size_t k = j;
    auto same = [&](size_t c) {
      return !ch[c].free && ch[c].bytes == ref[i].bytes && ch[c].module == ref[i].module &&
             ch[c].phase == ref[i].phase;
    };
    for (size_t seen = 0; k < ch.size() && seen < kLookAhead && !same(k); ++k) seen += !ch[k].free;
    if (k < ch.size() && same(k)) {
      out[i] = k;
      j = k + 1;
      ++found;
    }
  }
  if (!mostly_found(found, mallocs)) out.clear();
  return out;
}

// The requests of `changed` that make again what a forward made (a checkpointed module's
// recompute in the backward: mallocs matched to no reference malloc, made in the backward by a
// module), each with the reference forward's malloc it repeats: a module's n-th such malloc is
// the n-th malloc of its forward in the reference.
std::map<size_t, size_t> recomputed(const TorchPredictedStep& reference,
                                    const TorchPredictedStep& changed,
                                    const std::vector<size_t>& index) {
  std::vector<bool> mapped(changed.requests.size(), false);
  for (size_t c : index)
    if (c != kNone) mapped[c] = true;
  std::map<uint32_t, std::vector<size_t>> forward;  // module -> its forward mallocs, in order
  for (size_t i = 0; i < reference.requests.size(); ++i) {
    const auto& r = reference.requests[i];
    if (!r.free && r.module && r.phase == 'f') forward[r.module].push_back(i);
  }
  std::map<uint32_t, size_t> seen;
  std::map<size_t, size_t> out;  // changed request -> reference request
  for (size_t c = 0; c < changed.requests.size(); ++c) {
    const auto& r = changed.requests[c];
    if (r.free || mapped[c] || r.phase != 'b' || !r.module) continue;
    auto it = forward.find(r.module);
    const size_t n = seen[r.module]++;
    if (it != forward.end() && n < it->second.size() &&
        reference.requests[it->second[n]].bytes == r.bytes)
      out[c] = it->second[n];
  }
  return out;
}

// The run's workspaces and, for each request of `step` (one of the two weighed), the reference
// request it is: both empty unless the run aligns with `reference` and `reference` with
// `changed`, so that the two weighed steps get the workspaces or neither does.
struct Placement {
  std::vector<Workspace> ws;
  std::vector<size_t> index;  // reference request -> request of `step`
};
Placement placement(const RequestStream& run, const TorchPredictedStep& reference,
                    const TorchPredictedStep& changed, const TorchPredictedStep& step) {
  Placement p;
  p.ws = workspaces_of(run, reference);
  if (p.ws.empty()) return p;
  std::vector<size_t> identity(reference.requests.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  std::vector<size_t> to_changed =
      &changed == &reference ? identity : changed_index(reference, changed);
  if (to_changed.empty()) {
    p.ws.clear();
    return p;
  }
  p.index = &step == &reference ? std::move(identity) : std::move(to_changed);
  return p;
}

}  // namespace

bool workspaces_placeable(const RequestStream& run, const TorchPredictedStep& reference,
                          const TorchPredictedStep& changed) {
  return !placement(run, reference, changed, reference).ws.empty();
}

RequestStream fake_step_stream(const RequestStream& run, const TorchContext& ctx,
                               const TorchPredictedStep& step, const TorchPredictedStep* reference,
                               const TorchPredictedStep* changed) {
  RequestStream out;
  out.device = run.device;
  out.categorized = run.categorized;
  out.window_lost = run.window_lost;
  out.trace_sampled = run.trace_sampled;
  // What the run recorded before the step began: its parameters, buffers and batch.
  for (const Request& q : run.requests)
    if (!q.predicted && q.time_ns < step.time_ns && q.op != RequestOp::RecordedOom)
      out.requests.push_back(q);
  const uint32_t base = run.blocks;
  out.blocks = blocks_with(base, step);
  const uint64_t stream = step_stream(run, step.time_ns);
  const auto cats = categories_of(step);

  // The run's workspaces, placed after the requests of `step` that are the reference's they
  // came after, and again after a recompute of the forward request they came after.
  Placement p;
  if (reference) p = placement(run, *reference, changed ? *changed : step, step);
  const std::vector<Workspace>& ws = p.ws;
  const std::vector<size_t>& index = p.index;
  std::vector<std::vector<Request>> after(step.requests.size() + 1);  // [size]: the step's start
  auto slot = [&](size_t ref_index) -> std::vector<Request>& {
    const size_t c = ref_index == kNone ? kNone : index[ref_index];
    return c == kNone ? after.back() : after[c];
  };
  for (const Workspace& w : ws) {
    slot(w.after).push_back(w.malloc);
    if (!w.free) continue;
    if (w.freed_after == w.after || w.freed_after == kNone || index[w.freed_after] == kNone)
      slot(w.after).push_back(*w.free);
    else
      slot(w.freed_after).push_back(*w.free);
  }
  if (!ws.empty() && &step != reference) {
    // The workspaces by the reference request they came after, each in their order: a
    // recomputed request finds its own without a pass over all of them.
    std::vector<size_t> by_after;
    for (size_t i = 0; i < ws.size(); ++i)
      if (ws[i].after != kNone) by_after.push_back(i);
    std::stable_sort(by_after.begin(), by_after.end(),
                     [&](size_t a, size_t b) { return ws[a].after < ws[b].after; });
    for (const auto& [c, ref_index] : recomputed(*reference, step, index))
      for (auto it = std::lower_bound(by_after.begin(), by_after.end(), ref_index,
                                      [&](size_t i, size_t ref) { return ws[i].after < ref; });
           it != by_after.end() && ws[*it].after == ref_index; ++it) {
        const Workspace& w = ws[*it];
        Request m = w.malloc;
        m.block = out.blocks++;
        m.predicted = true;
        after[c].push_back(m);
        if (!w.free) continue;
        Request f = *w.free;
        f.block = m.block;
        f.predicted = true;
        after[c].push_back(f);  // the recompute's workspace lives within its operator
      }
  }
  auto put = [&](std::vector<Request>& rs) {
    for (Request& q : rs) {
      q.time_ns = step.time_ns;
      out.requests.push_back(q);
    }
  };
  put(after.back());
  for (size_t k = 0; k < step.requests.size(); ++k) {
    out.requests.push_back(predicted_request(step.requests[k], ctx, step.time_ns,
                                             step.requests[k].bytes, stream, base, cats[k],
                                             run.categorized));
    put(after[k]);
  }
  // A workspace the run did not free within the step stays to the step's end, as recorded.
  return out;
}

}  // namespace vramtrace::collector

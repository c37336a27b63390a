// The request stream (see request_stream.h): built from the recorded trace, scaled, and a step
// that never finished completed from the hook's prediction (a step run with a change:
// fake_step.cpp).
#include "collector/predict/request_stream.h"

#include "collector/predict/predicted_request.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>

namespace vramtrace::collector {

namespace {

struct Event {
  uint64_t time;
  uint32_t kind;  // 0 alloc, 1 free, 2 a recorded OOM's request
  uint32_t index;
  bool operator<(const Event& o) const {
    if (time != o.time) return time < o.time;
    if (kind != o.kind) return kind < o.kind;
    return index < o.index;
  }
};

uint64_t scaled_size(uint64_t bytes, double scale) {
  const double scaled = std::ceil(static_cast<double>(bytes) * scale);
  return scaled >= 1.8e19 ? UINT64_MAX / 2 : std::max<uint64_t>(1, static_cast<uint64_t>(scaled));
}

}  // namespace

bool scales_with_batch(Category c) {
  return c == Category::Activations || c == Category::Temporaries || c == Category::Inputs;
}

RequestStream recorded_stream(const TorchContext& ctx, const TorchMemory* tm, uint32_t device) {
  if (tm && &tm->context() != &ctx) tm = nullptr;  // the categories must be of these blocks
  RequestStream s;
  s.device = device;
  s.categorized = tm != nullptr;
  s.blocks = static_cast<uint32_t>(ctx.blocks.size());
  // The blocks are in allocation order, so their allocations come sorted (but where a wrapped
  // ring or a gap put some out of it); the frees and OOMs are sorted apart, then the three
  // merged: every replay builds this, so no sort of the whole.
  std::vector<Event> allocs, frees, ooms;
  for (size_t i = 0; i < ctx.blocks.size(); ++i) {
    const TorchBlock& b = ctx.blocks[i];
    if (b.device != device) continue;
    allocs.push_back({b.alloc_ns, 0, static_cast<uint32_t>(i)});
    if (b.free_ns != UINT64_MAX) frees.push_back({b.free_ns, 1, static_cast<uint32_t>(i)});
    s.window_lost |= b.before_window;
  }
  for (const TorchGap& g : ctx.gaps) s.trace_sampled |= g.device == device;
  for (size_t i = 0; i < ctx.oom_requests.size(); ++i)
    if (ctx.oom_requests[i].device == device) {
      ooms.push_back({ctx.oom_requests[i].time_ns, 2, static_cast<uint32_t>(i)});
      s.recorded_oom = true;
    }
  for (auto* v : {&allocs, &frees, &ooms})
    if (!std::is_sorted(v->begin(), v->end())) std::sort(v->begin(), v->end());
  std::vector<Event> both, events;
  both.reserve(allocs.size() + frees.size());
  std::merge(allocs.begin(), allocs.end(), frees.begin(), frees.end(), std::back_inserter(both));
  events.reserve(both.size() + ooms.size());
  std::merge(both.begin(), both.end(), ooms.begin(), ooms.end(), std::back_inserter(events));
  s.requests.reserve(events.size());
  for (const Event& e : events) {
    Request q;
    q.time_ns = e.time;
    if (e.kind == 2) {
      const TorchOomRequest& o = ctx.oom_requests[e.index];
      q.op = RequestOp::RecordedOom;
      q.bytes = o.bytes;
      q.stream = o.stream;
      q.block = UINT32_MAX;
      if (tm) {
        if (const PhaseSpan* ph = tm->phase_at(o.time_ns)) q.phase = ph->phase;
        q.iteration = tm->iteration_at(o.time_ns);
      }
    } else {
      const TorchBlock& b = ctx.blocks[e.index];
      q.op = e.kind == 0 ? RequestOp::Malloc : RequestOp::Free;
      q.bytes = b.bytes;
      q.stream = b.stream;
      q.block = e.index;
      if (tm) {
        const BlockInfo& info = tm->info()[e.index];
        q.category = info.category;
        q.module = info.module;
        q.phase = info.phase;
        q.iteration = info.iteration;
      }
    }
    s.requests.push_back(q);
  }
  return s;
}

RequestStream scale_batch(RequestStream s, double scale) {
  if (scale == 1.0) return s;
  for (Request& q : s.requests) {
    if (q.op == RequestOp::Malloc && !q.predicted && scales_with_batch(q.category)) {
      q.bytes = scaled_size(q.bytes, scale);
      q.scaled = true;
    } else if (q.op == RequestOp::RecordedOom && q.phase != TorchPhase::Optimizer &&
               q.phase != TorchPhase::None) {
      // The request the run failed on, as the allocator rounded it, made in a forward or
      // backward.
      q.bytes = static_cast<uint64_t>(std::ceil(static_cast<double>(q.bytes) * scale));
    }
  }
  return s;
}

// ---- completing a step ----------------------------------------------------------------------

namespace {

// The steps that complete an unfinished one, by batch. Two at one batch cannot both be the
// step at that batch (and would divide the interpolation between them by zero): the first is
// kept, the others are said in `problems`.
std::vector<const TorchPredictedStep*> predicted_steps(const TorchContext& ctx, uint32_t device,
                                                       std::vector<std::string>* problems) {
  std::vector<const TorchPredictedStep*> out;
  for (const auto& st : ctx.predicted_steps)
    if (st.device == device && st.status == "ok" && !st.requests.empty() && st.batch &&
        st.change.empty())
      out.push_back(&st);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto* a, const auto* b) { return a->batch < b->batch; });
  size_t kept = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (kept && out[kept - 1]->batch == out[i]->batch) {
      if (problems)
        problems->push_back(
            "the start-up hook's predicted steps " + std::to_string(out[kept - 1]->id) + " and " +
            std::to_string(out[i]->id) + " are both at batch " + std::to_string(out[i]->batch) +
            ": step " + std::to_string(out[i]->id) + " is left out");
      continue;
    }
    out[kept++] = out[i];
  }
  out.resize(kept);
  return out;
}

TorchPhase phase_of(char p) {
  return p == 's' ? TorchPhase::Optimizer : p == 'b' ? TorchPhase::Backward : TorchPhase::Forward;
}

// A step's requests up to its last malloc. The frees after it change no size and no peak:
// what a step lets go as it ends may differ between steps (a step whose second iteration
// repeats the first lets go at its end blocks that the step run in full still held).
size_t through_last_malloc(const TorchPredictedStep& st) {
  size_t n = st.requests.size();
  while (n > 0 && st.requests[n - 1].free) --n;
  return n;
}

// Whether the steps make the same requests in the same order (ops, blocks, modules) up to
// their last malloc, so that each request's size can be read as a function of the batch.
bool aligned(const std::vector<const TorchPredictedStep*>& steps) {
  if (steps.size() < 2) return false;
  for (size_t i = 1; i < steps.size(); ++i)
    if (!(static_cast<double>(steps[i - 1]->batch) < static_cast<double>(steps[i]->batch)))
      return false;  // the interpolation divides by the batches' difference
  const size_t n = through_last_malloc(*steps[0]);
  for (const auto* st : steps) {
    if (through_last_malloc(*st) != n) return false;
    for (size_t i = 0; i < n; ++i) {
      const auto &a = st->requests[i], &b = steps[0]->requests[i];
      if (a.free != b.free || a.block != b.block || a.module != b.module || a.phase != b.phase)
        return false;
    }
  }
  return true;
}

// The sizes of the step's requests at `batch` (see completed_stream), and how they were found.
std::vector<uint64_t> sizes_at(const std::vector<const TorchPredictedStep*>& steps,
                               const std::vector<Category>& cats, double batch,
                               std::string* method) {
  size_t n = 0;  // the longest step's: any of them may be the shape the stream is made from
  for (const auto* st : steps) n = std::max(n, st->requests.size());
  std::vector<uint64_t> out(n);
  if (aligned(steps)) {
    // The two batches around `batch` (or the two nearest it, beyond either end): linear.
    size_t hi = 1;
    while (hi + 1 < steps.size() && static_cast<double>(steps[hi]->batch) < batch) ++hi;
    const TorchPredictedStep &a = *steps[hi - 1], &b = *steps[hi];
    const double ba = static_cast<double>(a.batch), bb = static_cast<double>(b.batch);
    for (size_t i = 0; i < n; ++i) {
      // Past a step's end: the other's frees after the last malloc, whose sizes nothing reads.
      const double sa = static_cast<double>(i < a.requests.size() ? a.requests[i].bytes : 0),
                   sb = static_cast<double>(i < b.requests.size() ? b.requests[i].bytes : 0);
      const double v = std::round(sa + (sb - sa) * (batch - ba) / (bb - ba));
      out[i] = v >= 1.8e19 ? UINT64_MAX / 2
                           : std::max<uint64_t>(1, static_cast<uint64_t>(std::max(v, 0.0)));
    }
    *method = batch == ba || batch == bb
                  ? "predicted at batch " + std::to_string(batch == ba ? a.batch : b.batch)
                  : "interpolated from the steps predicted at batches " + std::to_string(a.batch) +
                        " and " + std::to_string(b.batch);
    return out;
  }
  // The nearest step, its sizes that depend on the batch scaled (made in the forward or the
  // backward and not a gradient).
  const TorchPredictedStep* near = steps[0];
  for (const auto* st : steps)
    if (std::fabs(static_cast<double>(st->batch) - batch) <
        std::fabs(static_cast<double>(near->batch) - batch))
      near = st;
  const double f = batch / static_cast<double>(near->batch);
  for (size_t i = 0; i < std::min(near->requests.size(), cats.size()); ++i) {
    const auto& r = near->requests[i];
    out[i] = f != 1.0 && r.phase != 's' && scales_with_batch(cats[i]) ? scaled_size(r.bytes, f)
                                                                      : r.bytes;
  }
  *method = f == 1.0 ? "predicted at batch " + std::to_string(near->batch)
                     : "scaled from the step predicted at batch " + std::to_string(near->batch);
  return out;
}

}  // namespace

// What a predicted block is, by when it was made and freed, as collector/model/torch_memory.h
// classifies recorded blocks: kept past the forward -> activations, freed in the phase that
// made it -> temporaries, made in the backward and kept -> gradients, in the step and kept ->
// optimizer state.
std::vector<Category> categories_of(const TorchPredictedStep& st) {
  // By block number (the reader keeps them below the count of requests).
  uint64_t most = 0;
  for (const auto& r : st.requests) most = std::max(most, r.block);
  std::vector<std::pair<char, char>> life(most + 1, {0, 0});  // (made in, freed in; 0: never)
  for (const auto& r : st.requests) {
    if (!r.free)
      life[r.block] = {r.phase, 0};
    else if (life[r.block].first)
      life[r.block].second = r.phase;
  }
  auto forward = [](char p) { return p == 'f' || p == 'l'; };
  std::vector<Category> out;
  out.reserve(st.requests.size());
  for (const auto& r : st.requests) {
    const auto [made, freed] = life[r.block];
    Category c = Category::Temporaries;
    if (forward(made))
      c = freed && forward(freed) ? Category::Temporaries : Category::Activations;
    else if (made == 'b')
      c = freed ? Category::Temporaries : Category::Gradients;
    else if (made == 's')
      c = freed ? Category::Temporaries : Category::OptimizerState;
    out.push_back(c);
  }
  return out;
}

// The block count of a stream holding `step`'s blocks numbered after the run's `base`.
uint32_t blocks_with(uint32_t base, const TorchPredictedStep& step) {
  uint64_t most = 0;
  for (const auto& r : step.requests) most = std::max(most, r.block);
  return base + static_cast<uint32_t>(std::min<uint64_t>(most, UINT32_MAX - base));
}

// The CUDA stream of a step's predicted requests (a fake-tensor run has none): that of the
// run's first malloc from the step's start `t0`, else of its last.
uint64_t step_stream(const RequestStream& run, uint64_t t0) {
  uint64_t stream = 0;
  for (const Request& q : run.requests)
    if (q.op == RequestOp::Malloc) {
      stream = q.stream;
      if (q.time_ns >= t0) break;
    }
  return stream;
}

// A predicted request as the engine replays it, at `bytes`, its block numbered after `base`.
// The first step is iteration 0 where iterations are known (`categorized`).
Request predicted_request(const TorchPredictedRequest& r, const TorchContext& ctx, uint64_t time_ns,
                          uint64_t bytes, uint64_t stream, uint32_t base, Category category,
                          bool categorized) {
  Request q;
  q.time_ns = time_ns;
  q.op = r.free ? RequestOp::Free : RequestOp::Malloc;
  q.bytes = bytes;
  q.stream = stream;
  q.block = base + static_cast<uint32_t>(std::min<uint64_t>(r.block - 1, UINT32_MAX - base - 1));
  q.category = category;
  q.module = r.module <= ctx.modules.size() ? r.module : 0;
  q.phase = phase_of(r.phase);
  q.iteration = categorized ? 0 : -1;
  q.predicted = true;
  return q;
}

bool has_predicted_step(const TorchContext& ctx, uint32_t device) {
  return !predicted_steps(ctx, device, nullptr).empty();
}

RequestStream completed_stream(const RequestStream& recorded, const TorchContext& ctx,
                               uint32_t device, double scale) {
  std::vector<std::string> problems;
  const auto steps = predicted_steps(ctx, device, &problems);
  if (steps.empty()) return scale_batch(recorded, scale);
  const TorchPredictedStep& first = *steps[0];
  const uint64_t t0 = first.time_ns;
  const uint64_t rec_batch = first.recorded_batch ? first.recorded_batch : first.batch;
  // Each step's own requests are the nearest step's shape when they do not align.
  const TorchPredictedStep* shape = steps[0];
  for (const auto* st : steps)
    if (st->batch == rec_batch) shape = st;
  const auto cats = categories_of(*shape);
  std::vector<const TorchPredictedStep*> used = aligned(steps) ? steps : std::vector{shape};
  std::string method, ignored;
  const auto at_recorded = sizes_at(used, cats, static_cast<double>(rec_batch), &ignored);
  const double batch = scale * static_cast<double>(rec_batch);
  const auto at_batch = sizes_at(used, cats, batch, &method);

  RequestStream out;
  out.device = recorded.device;
  out.recorded_oom = recorded.recorded_oom;
  out.window_lost = recorded.window_lost;
  out.trace_sampled = recorded.trace_sampled;
  out.categorized = recorded.categorized;
  const uint32_t base = recorded.blocks;
  out.blocks = blocks_with(base, *shape);

  // The recorded requests before the step, scaled by category as a recorded run is.
  size_t split = 0;
  while (split < recorded.requests.size() && recorded.requests[split].time_ns < t0) ++split;
  RequestStream before = recorded;
  before.requests.resize(split);
  before = scale_batch(std::move(before), scale);

  // The recorded part of the step, aligned with the predicted requests in order: a recorded
  // malloc of the size a predicted request (at the recorded batch) has, a little ahead, is that
  // request; one that matches none is what fake tensors do not see (a cuBLAS or cuDNN
  // workspace) and is kept where it came, with its free when it had one.
  const auto& pred = shape->requests;
  constexpr size_t kLookAhead = 32;
  // The recorded requests kept, each before predicted request `first` (in order: j only grows).
  std::vector<std::pair<size_t, Request>> kept;
  kept.reserve(recorded.requests.size() - split);
  std::vector<uint64_t> anchor(pred.size(), 0);  // the matched request's time
  std::vector<bool> matched_block(recorded.blocks, false);
  std::vector<uint64_t> sizes(pred.size());
  for (size_t k = 0; k < pred.size(); ++k)
    sizes[k] = pred[k].free ? MallocWindow::kFree : at_recorded[k];
  MallocWindow window(sizes, kLookAhead);
  size_t j = 0;
  uint64_t kept_count = 0;
  for (size_t i = split; i < recorded.requests.size(); ++i) {
    const Request& q = recorded.requests[i];
    if (q.op == RequestOp::RecordedOom) continue;  // the predicted step makes it
    if (q.op == RequestOp::Free) {
      if (q.block < matched_block.size() && matched_block[q.block]) continue;
      kept.emplace_back(j, q);
      continue;
    }
    const size_t k = window.find(j, q.bytes);
    if (k != SIZE_MAX) {
      matched_block[q.block] = true;
      anchor[k] = q.time_ns;
      j = k + 1;
    } else {
      kept.emplace_back(j, q);
      ++kept_count;
    }
  }

  Completion c;
  c.recorded_batch = rec_batch;
  c.batch = batch;
  c.method = method;
  c.kept_recorded = kept_count;
  for (const auto* st : steps) c.batches.push_back(st->batch);
  out.requests = std::move(before.requests);
  out.requests.reserve(out.requests.size() + kept.size() + pred.size());
  uint64_t t = t0;
  std::vector<bool> named(ctx.modules.size() + 1, false);
  const uint64_t stream = step_stream(recorded, t0);
  size_t next_kept = 0;
  for (size_t k = 0; k <= pred.size(); ++k) {
    for (; next_kept < kept.size() && kept[next_kept].first == k; ++next_kept) {
      const Request& q = kept[next_kept].second;
      t = std::max(t, q.time_ns);
      out.requests.push_back(q);
    }
    if (k == pred.size()) break;
    const TorchPredictedRequest& r = pred[k];
    t = std::max(t, anchor[k]);
    Request q =
        predicted_request(r, ctx, t, at_batch[k], stream, base, cats[k], recorded.categorized);
    q.scaled = !r.free && at_batch[k] != at_recorded[k];
    if (!r.free) {
      ++c.predicted_requests;
      if (q.module && !named[q.module]) {
        named[q.module] = true;
        c.modules.push_back(ctx.modules[q.module - 1].name);
      }
    }
    out.requests.push_back(q);
  }
  out.completion = std::move(c);
  out.problems = std::move(problems);
  return out;
}

}  // namespace vramtrace::collector

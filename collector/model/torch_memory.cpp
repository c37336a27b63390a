// Classifying PyTorch's blocks (see torch_memory.h): one sweep over the hook's marks to find
// phases and iterations, one sweep over blocks, labels and marks in time order to classify.
#include "collector/model/torch_memory.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "collector/model/allocation.h"

namespace vramtrace::collector {

const char* category_key(Category c) {
  static const char* const keys[] = {"parameters",      "gradients",       "optimizer_state",
                                     "activations",     "temporaries",     "inputs",
                                     "workspaces",      "communication",   "private_pool",
                                     "allocator_cache", "outside_pytorch", "unclassified"};
  return keys[static_cast<size_t>(c)];
}

const char* category_title(Category c) {
  static const char* const titles[] = {"parameters",
                                       "gradients",
                                       "optimizer state",
                                       "activations",
                                       "temporaries",
                                       "inputs and data",
                                       "library workspaces",
                                       "communication (NCCL)",
                                       "CUDA-graph / private pools",
                                       "allocator cache (reserved, free)",
                                       "outside PyTorch (context, other libraries)",
                                       "unclassified"};
  return titles[static_cast<size_t>(c)];
}

const char* phase_key(TorchPhase p) {
  static const char* const keys[] = {"other", "forward", "backward", "optimizer", "evaluation"};
  return keys[static_cast<size_t>(p)];
}

namespace {

// The module stack after mark `m`: a forward starts it anew, a module call pushes, an end pops
// to the module that ends (one that raised never ended).
void follow_mark(std::vector<uint32_t>& modules, const TorchMark& m) {
  switch (m.kind) {
    case MarkKind::Forward:
    case MarkKind::ForwardEval:
    case MarkKind::ForwardEvalGrad: modules.assign(1, m.id); break;
    case MarkKind::Module: modules.push_back(m.id); break;
    case MarkKind::ModuleEnd:
    case MarkKind::ForwardEnd:
      while (!modules.empty() && modules.back() != m.id) modules.pop_back();
      if (!modules.empty()) modules.pop_back();
      break;
    default: break;
  }
}

}  // namespace

TorchMemory::TorchMemory(TorchContext ctx) : ctx_(std::move(ctx)) {
  find_phases();
  find_private_pools();
  classify();
  for (size_t i = 0; i < ctx_.blocks.size(); ++i) {
    const uint32_t dev = ctx_.blocks[i].device;
    auto it = std::find(devices_.begin(), devices_.end(), dev);
    size_t slot = static_cast<size_t>(it - devices_.begin());
    if (it == devices_.end()) {
      devices_.push_back(dev);
      by_address_.emplace_back();
    }
    by_address_[slot].push_back(i);
  }
  for (auto& v : by_address_)
    std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) {
      return ctx_.blocks[a].address < ctx_.blocks[b].address;
    });
}

void TorchMemory::find_phases() {
  // Forward, backward and step spans from their marks; module calls inside do not nest here.
  uint32_t site = 0, first_root = 0;
  std::vector<uint64_t> step_ends, root_forwards;
  uint64_t first_forward = 0;
  auto open = [&](TorchPhase ph, uint64_t t, bool grad = true) {
    phases_.push_back({ph, t, UINT64_MAX, -1, site, grad});
    site = 0;
  };
  auto close = [&](TorchPhase ph, uint64_t t) {
    for (auto it = phases_.rbegin(); it != phases_.rend(); ++it)
      if (it->end_ns == UINT64_MAX) {
        if (it->phase == ph || (ph == TorchPhase::Forward && it->phase == TorchPhase::Evaluation))
          it->end_ns = t;
        break;
      }
  };
  for (const TorchMark& m : ctx_.marks) {
    switch (m.kind) {
      case MarkKind::Site: site = m.id; break;
      case MarkKind::Move:
        moves_.push_back({TorchPhase::None, m.time_ns, UINT64_MAX, -1, site, true});
        site = 0;
        break;
      case MarkKind::MoveEnd:
        if (!moves_.empty() && moves_.back().end_ns == UINT64_MAX) moves_.back().end_ns = m.time_ns;
        break;
      case MarkKind::Forward:
      case MarkKind::ForwardEval:
      case MarkKind::ForwardEvalGrad:
        if (m.autocast) autocast_ = true;
        if (!first_forward) first_forward = m.time_ns;
        if (!first_root) first_root = m.id;
        if (m.id == first_root) root_forwards.push_back(m.time_ns);
        open(m.kind == MarkKind::Forward ? TorchPhase::Forward : TorchPhase::Evaluation, m.time_ns,
             m.kind != MarkKind::ForwardEval);
        break;
      case MarkKind::ForwardEnd: close(TorchPhase::Forward, m.time_ns); break;
      case MarkKind::Backward: open(TorchPhase::Backward, m.time_ns); break;
      case MarkKind::BackwardEnd: close(TorchPhase::Backward, m.time_ns); break;
      case MarkKind::Step: open(TorchPhase::Optimizer, m.time_ns); break;
      case MarkKind::StepEnd:
        close(TorchPhase::Optimizer, m.time_ns);
        if (m.id == 1) step_ends.push_back(m.time_ns);
        break;
      default: break;
    }
  }
  steps_ = step_ends.size();
  if (!step_ends.empty()) {
    iterations_.push_back(first_forward ? std::min(first_forward, step_ends[0]) : step_ends[0]);
    iterations_.insert(iterations_.end(), step_ends.begin(), step_ends.end());
    // The span after the last step is an iteration only if a forward ran in it.
    if (root_forwards.empty() || root_forwards.back() < step_ends.back()) iterations_.pop_back();
    iteration_source_ = "optimizer.step()";
  } else if (!root_forwards.empty()) {
    iterations_ = root_forwards;
    iteration_source_ = "forward of " + module_name(first_root);
  }
  for (PhaseSpan& ph : phases_) ph.iteration = iteration_at(ph.start_ns);
}

void TorchMemory::find_private_pools() {
  const auto& segs = ctx_.pool_segments;
  const auto& blocks = ctx_.blocks;
  pool_segment_ns_.assign(segs.size(), 0);
  pool_segment_of_.assign(blocks.size(), -1);
  if (segs.empty()) return;
  // A segment live at the dump was made by the allocator's latest segment_alloc at its address;
  // memory in its range given back before that was another segment's (an address comes back
  // after empty_cache()), and so were the blocks made there before. The segments live at the
  // dump do not overlap: each of the trace's changes finds its segments by address.
  std::vector<size_t> order(segs.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  const auto key = [&](size_t s) { return std::pair{segs[s].device, segs[s].address}; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  // The first segment (in `order`) that may hold `address` or lie after it.
  const auto from = [&](uint32_t device, uint64_t address) {
    auto it = std::upper_bound(
        order.begin(), order.end(), std::pair{device, address},
        [&](const std::pair<uint32_t, uint64_t>& v, size_t s) { return v < key(s); });
    return it == order.begin() ? it : it - 1;
  };
  for (const TorchReserve& x : ctx_.reserves) {  // in time order: the latest wins
    const uint64_t n = static_cast<uint64_t>(x.delta > 0 ? x.delta : -x.delta);
    for (auto it = from(x.device, x.address); it != order.end(); ++it) {
      const TorchPoolSegment& g = segs[*it];
      if (g.device < x.device) continue;  // the last of the devices before
      if (g.device > x.device || g.address >= x.address + n) break;
      if (x.delta > 0 && x.address == g.address)
        pool_segment_ns_[*it] = x.time_ns;
      else if (x.delta < 0 && x.address < g.address + g.bytes && x.address + n > g.address)
        pool_segment_ns_[*it] = x.time_ns;
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const TorchBlock& b = blocks[i];
    auto it = std::upper_bound(
        order.begin(), order.end(), std::pair{b.device, b.address},
        [&](const std::pair<uint32_t, uint64_t>& v, size_t s) { return v < key(s); });
    if (it == order.begin()) continue;
    const size_t s = *--it;
    if (segs[s].device == b.device && b.address < segs[s].address + segs[s].bytes &&
        b.alloc_ns >= pool_segment_ns_[s])
      pool_segment_of_[i] = static_cast<int64_t>(s);
  }
}

void TorchMemory::classify() {
  info_.assign(ctx_.blocks.size(), BlockInfo{});
  classify_by_phase();
  classify_named();
  // A private pool's block is the pool's whatever it held: a graph's replays reuse it.
  for (size_t i = 0; i < info_.size(); ++i)
    if (pool_segment_of_[i] >= 0) info_[i].category = Category::PrivatePool;
}

namespace {

// A block's category from the phase that made it: whether it outlived the phase, and whether it
// is a library's workspace (see classify_by_phase). `otherwise`: outside the phases.
Category category_in_phase(const PhaseSpan& in, bool outlives, bool workspace, Category otherwise) {
  switch (in.phase) {
    case TorchPhase::Forward:
      return workspace  ? Category::Workspaces
             : outlives ? Category::Activations
                        : Category::Temporaries;
    case TorchPhase::Evaluation:
      // With grad on, an evaluation forward keeps its graph like a training one.
      return !outlives ? Category::Temporaries : in.grad ? Category::Activations : Category::Inputs;
    case TorchPhase::Backward:
      return workspace  ? Category::Workspaces
             : outlives ? Category::Gradients
                        : Category::Temporaries;
    case TorchPhase::Optimizer: return outlives ? Category::OptimizerState : Category::Temporaries;
    case TorchPhase::None: break;
  }
  return otherwise;
}

}  // namespace

// Each block by the phase that made it (forward, backward, optimizer, evaluation, outside any)
// and whether it outlived that phase; its module from the module marks, or, in a forward the hook
// did not trace, from the template of the last traced forward of the same model.
void TorchMemory::classify_by_phase() {
  const auto& blocks = ctx_.blocks;
  // Blocks by allocation time (the trace's order, but devices interleave).
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return blocks[a].alloc_ns < blocks[b].alloc_ns; });
  size_t mark = 0, phase = 0;
  std::vector<uint32_t> modules;  // the module stack
  const PhaseSpan* current = nullptr;
  // The outermost forward running: its template (being built when traced, read when not),
  // how many blocks it has made, and whether they all matched the template so far.
  int64_t building = -1, reading = -1;
  size_t made = 0;
  bool aligned = true;  // every block so far had the template's size at its position
  bool cut = false;     // an OOM inside this forward (it may end there)
  std::vector<size_t> reading_blocks;
  std::map<uint64_t, int64_t> latest;  // template key -> index of its latest traced forward
  // An untraced forward that made as many blocks as its template (sizes may scale with the
  // batch: the sequence of operations is the same), or that an OOM cut short, takes the
  // template's modules position by position; otherwise only the prefix whose sizes agree did.
  auto finish_reading = [&]() {
    if (reading >= 0 && !aligned) {
      const auto& tb = templates_[static_cast<size_t>(reading)].blocks;
      if (made == tb.size() || (cut && made <= tb.size()))
        for (size_t k = 0; k < reading_blocks.size(); ++k)
          info_[reading_blocks[k]].module = tb[k].second;
    }
    reading_blocks.clear();
  };
  auto forward_mark = [&](const TorchMark& m) {
    const bool fwd = m.kind == MarkKind::Forward || m.kind == MarkKind::ForwardEval ||
                     m.kind == MarkKind::ForwardEvalGrad;
    if (m.kind == MarkKind::Oom) cut = true;
    if (m.kind == MarkKind::ForwardEnd) {
      if (reading >= 0 ||
          (building < 0 && !untraced_.empty() && untraced_.back().end_ns == UINT64_MAX))
        untraced_.back().end_ns = m.time_ns;
      finish_reading();
      building = reading = -1;
    }
    if (!fwd) return;
    finish_reading();
    cut = false;
    const uint64_t key = uint64_t{m.id} * 16 + static_cast<uint64_t>(m.kind);
    made = 0;
    aligned = true;
    building = reading = -1;
    if (!m.untraced) {
      templates_.push_back({key, {}});
      building = latest[key] = static_cast<int64_t>(templates_.size()) - 1;
    } else {
      auto it = latest.find(key);
      reading = it != latest.end() ? it->second : -1;
      untraced_.push_back({m.time_ns, UINT64_MAX, reading});
      if (reading < 0) reading = -2;  // untraced, no template yet
    }
  };
  for (size_t i : order) {
    const uint64_t t = blocks[i].alloc_ns;
    while (mark < ctx_.marks.size() && ctx_.marks[mark].time_ns <= t) {
      forward_mark(ctx_.marks[mark]);
      follow_mark(modules, ctx_.marks[mark++]);
    }
    while (phase < phases_.size() && phases_[phase].start_ns <= t) current = &phases_[phase++];
    // The latest phase begun may have ended: then the block is outside any phase.
    const PhaseSpan* in = current && t <= current->end_ns ? current : nullptr;
    BlockInfo& b = info_[i];
    if (blocks[i].before_window || blocks[i].in_gap || blocks[i].phase_unknown) {
      // Its moment is not known (only that it came before the ring's window, or between two
      // of the sampled iterations' windows): not a phase's.
      b.category = Category::Unclassified;
      continue;
    }
    b.iteration = iteration_at(t);
    if (!in) {
      b.phase = TorchPhase::None;
      b.category = Category::Inputs;
      auto move = std::upper_bound(moves_.begin(), moves_.end(), t,
                                   [](uint64_t v, const PhaseSpan& m) { return v < m.start_ns; });
      if (move != moves_.begin() && t <= std::prev(move)->end_ns) b.site = std::prev(move)->site;
      continue;
    }
    b.phase = in->phase;
    b.site = in->site;
    if (!modules.empty() &&
        (in->phase == TorchPhase::Forward || in->phase == TorchPhase::Evaluation)) {
      b.module = modules.back();
      if (building >= 0) {
        templates_[static_cast<size_t>(building)].blocks.push_back({blocks[i].bytes, b.module});
      } else if (reading >= 0) {
        const auto& tb = templates_[static_cast<size_t>(reading)].blocks;
        aligned = aligned && made < tb.size() && tb[made].first == blocks[i].bytes;
        if (aligned) b.module = tb[made].second;
        reading_blocks.push_back(i);
      }
      ++made;
    }
    // A phase still open when the trace ended (the program died in it): what it made and
    // still held then was kept past it; what it made and freed was its own.
    const bool outlives =
        in->end_ns == UINT64_MAX ? blocks[i].free_ns == UINT64_MAX : blocks[i].free_ns > in->end_ns;
    // Made in the first iteration, never freed, yet no named storage: a library's workspace
    // made through PyTorch's allocator on first use (cuBLAS's, per handle and stream).
    const bool workspace = blocks[i].free_ns == UINT64_MAX && b.iteration <= 0 &&
                           in->end_ns != UINT64_MAX && steps_ > 0;
    b.category = category_in_phase(*in, outlives, workspace, b.category);
  }
  for (; mark < ctx_.marks.size(); ++mark) forward_mark(ctx_.marks[mark]);
  finish_reading();
}

// Named storages (parameters, gradients, optimizer state) are what the hook's labels say,
// whatever phase made their blocks.
void TorchMemory::classify_named() {
  const auto& blocks = ctx_.blocks;
  // Named storages: the block live at the label's address when it was taken.
  std::map<std::pair<uint32_t, uint64_t>, size_t> live;
  size_t li = 0;
  const auto events = lifetime_events(nullptr);
  auto apply_labels_until = [&](uint64_t t) {
    for (; li < ctx_.labels.size() && ctx_.labels[li].time_ns < t; ++li) {
      const TorchLabel& l = ctx_.labels[li];
      auto it = live.find({l.device, l.ptr});
      if (it == live.end()) continue;
      BlockInfo& b = info_[it->second];
      b.label = static_cast<int64_t>(li);
      b.category = l.kind == "grad"    ? Category::Gradients
                   : l.kind == "state" ? Category::OptimizerState
                                       : Category::Parameters;
    }
  };
  // A block from before the ring's window takes the latest name its address had before the
  // window (the hook names a parameter or optimizer state once, at the first steps): the
  // storage it names is still there unless another name came since.
  std::map<std::pair<uint32_t, uint64_t>, size_t> named_before;
  for (size_t k = 0; k < ctx_.labels.size(); ++k) {
    const TorchLabel& l = ctx_.labels[k];
    auto w = ctx_.window_start.find(l.device);
    if (w != ctx_.window_start.end() && l.time_ns < w->second) named_before[{l.device, l.ptr}] = k;
  }
  // Where the hook labelled every named storage at the dump, a block still live then that it
  // did not label is none of them, whatever its address held before the window.
  uint64_t named_all_ns = 0;
  for (const TorchMark& m : ctx_.marks)
    if (m.kind == MarkKind::Named) named_all_ns = m.time_ns;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!blocks[i].before_window) continue;
    if (named_all_ns && blocks[i].free_ns > named_all_ns) continue;
    auto it = named_before.find({blocks[i].device, blocks[i].address});
    if (it == named_before.end() || ctx_.labels[it->second].bytes > blocks[i].bytes) continue;
    const TorchLabel& l = ctx_.labels[it->second];
    info_[i].label = static_cast<int64_t>(it->second);
    info_[i].category = l.kind == "grad"    ? Category::Gradients
                        : l.kind == "state" ? Category::OptimizerState
                                            : Category::Parameters;
  }
  for (const auto& [t, e] : events) {
    apply_labels_until(t);
    const size_t i = static_cast<size_t>(e > 0 ? e : -e) - 1;
    if (e > 0)
      live[{blocks[i].device, blocks[i].address}] = i;
    else if (auto it = live.find({blocks[i].device, blocks[i].address});
             it != live.end() && it->second == i)
      live.erase(it);
  }
  apply_labels_until(UINT64_MAX);
}

std::vector<std::pair<uint64_t, int64_t>> TorchMemory::lifetime_events(
    const uint32_t* device) const {
  std::vector<std::pair<uint64_t, int64_t>> events;
  events.reserve(ctx_.blocks.size() * 2);
  for (size_t i = 0; i < ctx_.blocks.size(); ++i) {
    if (device && ctx_.blocks[i].device != *device) continue;
    events.push_back({ctx_.blocks[i].alloc_ns, static_cast<int64_t>(i) + 1});
    if (ctx_.blocks[i].free_ns != UINT64_MAX)
      events.push_back({ctx_.blocks[i].free_ns, -(static_cast<int64_t>(i) + 1)});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return events;
}

int64_t TorchMemory::iteration_at(uint64_t t) const {
  auto it = std::upper_bound(iterations_.begin(), iterations_.end(), t);
  return static_cast<int64_t>(it - iterations_.begin()) - 1;
}

const PhaseSpan* TorchMemory::phase_at(uint64_t t) const {
  // Phases do not nest: the latest begun, if it has not ended.
  auto it = std::upper_bound(phases_.begin(), phases_.end(), t,
                             [](uint64_t v, const PhaseSpan& p) { return v < p.start_ns; });
  if (it == phases_.begin()) return nullptr;
  --it;
  return t <= it->end_ns ? &*it : nullptr;
}

uint32_t TorchMemory::module_at(uint64_t t) const {
  std::vector<uint32_t> modules;
  for (const TorchMark& m : ctx_.marks) {
    if (m.time_ns > t) break;
    follow_mark(modules, m);
  }
  if (modules.size() == 1)
    for (const UntracedForward& f : untraced_)
      if (f.start_ns <= t && t <= f.end_ns) {
        // The hook's OOM observer read the modules running off the Python stack and marked
        // them just before its OOM mark (microseconds after the allocator's failure).
        uint32_t innermost = 0;
        for (const TorchMark& m : ctx_.marks) {
          if (m.time_ns < t) continue;
          if (m.time_ns > f.end_ns || m.kind == MarkKind::ForwardEnd) break;
          if (m.kind == MarkKind::Module) innermost = m.id;
          if (m.kind == MarkKind::Oom) {
            if (innermost) return innermost;
            break;
          }
        }
        // The failed request would have been the next block the forward made.
        size_t k = 0;
        for (const TorchBlock& b : ctx_.blocks)
          if (b.alloc_ns >= f.start_ns && b.alloc_ns <= t) ++k;
        if (const uint32_t m = aligned_module(f, k)) return m;
      }
  return modules.empty() ? 0 : modules.back();
}

uint32_t TorchMemory::aligned_module(const UntracedForward& f, size_t k) const {
  if (f.tmpl < 0) return 0;
  const auto& tb = templates_[static_cast<size_t>(f.tmpl)].blocks;
  if (k >= tb.size()) return 0;
  // The forward's blocks so far, in allocation order, must have matched the template.
  std::vector<const TorchBlock*> made;
  for (const TorchBlock& b : ctx_.blocks)
    if (b.alloc_ns >= f.start_ns && b.alloc_ns <= f.end_ns) made.push_back(&b);
  std::stable_sort(made.begin(), made.end(), [](const TorchBlock* a, const TorchBlock* b) {
    return a->alloc_ns < b->alloc_ns;
  });
  for (size_t j = 0; j < k; ++j)
    if (j >= made.size() || made[j]->bytes != tb[j].first) return 0;
  return tb[k].second;
}

std::vector<size_t>::const_iterator TorchMemory::first_at(const std::vector<size_t>& v,
                                                          uint64_t address) const {
  return std::lower_bound(v.begin(), v.end(), address,
                          [&](size_t i, uint64_t a) { return ctx_.blocks[i].address < a; });
}

const std::vector<size_t>* TorchMemory::by_address(uint32_t device) const {
  auto d = std::find(devices_.begin(), devices_.end(), device);
  return d == devices_.end() ? nullptr : &by_address_[static_cast<size_t>(d - devices_.begin())];
}

const BlockInfo* TorchMemory::block(uint32_t device, uint64_t address, uint64_t alloc_ns) const {
  const std::vector<size_t>* found = by_address(device);
  if (!found) return nullptr;
  const auto& v = *found;
  auto it = first_at(v, address);
  // Blocks at one address over time: the one made closest to alloc_ns (the model's and the
  // trace's times of one block agree to the microsecond).
  const BlockInfo* best = nullptr;
  uint64_t best_gap = 2000;  // ns
  for (; it != v.end() && ctx_.blocks[*it].address == address; ++it) {
    const uint64_t a = ctx_.blocks[*it].alloc_ns;
    const uint64_t gap = a > alloc_ns ? a - alloc_ns : alloc_ns - a;
    if (gap <= best_gap) {
      best_gap = gap;
      best = &info_[*it];
    }
  }
  return best;
}

std::vector<size_t> TorchMemory::live_at(uint32_t device, uint64_t t) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < ctx_.blocks.size(); ++i) {
    const TorchBlock& b = ctx_.blocks[i];
    if (b.device == device && b.alloc_ns <= t && b.free_ns > t) out.push_back(i);
  }
  return out;
}

uint64_t TorchMemory::reserved_at(uint32_t device, uint64_t t) const {
  int64_t r = 0;
  for (const TorchReserve& x : ctx_.reserves) {
    if (x.time_ns > t) break;
    if (x.device == device) r += x.delta;
  }
  return r > 0 ? static_cast<uint64_t>(r) : 0;
}

uint64_t TorchMemory::after_segment(uint32_t device, uint64_t address, uint64_t t,
                                    uint64_t until) const {
  // The allocator's record of that segment: the one at `address` made closest to `t` (an
  // address comes back after a segment is freed), within a second (the two clocks agree to
  // the microsecond).
  const TorchReserve* seg = nullptr;
  uint64_t best_gap = 1'000'000'000;
  for (const TorchReserve& x : ctx_.reserves) {
    if (x.device != device || x.address != address || x.delta <= 0) continue;
    const uint64_t gap = x.time_ns > t ? x.time_ns - t : t - x.time_ns;
    if (gap <= best_gap) {
      best_gap = gap;
      seg = &x;
    }
  }
  // Not at that address (expandable segments: the driver's handle is mapped elsewhere): the
  // first segment the allocator added from a microsecond before `t` to a millisecond after.
  if (!seg)
    for (const TorchReserve& x : ctx_.reserves)
      if (x.device == device && x.delta > 0 && x.time_ns + 2000 >= t) {
        if (x.time_ns <= (until ? until : t + 1'000'000)) seg = &x;
        break;
      }
  if (!seg) return t;
  // The first block made in it since: of the device's blocks by address, those in its range.
  const uint64_t start = seg->address, end = start + static_cast<uint64_t>(seg->delta);
  uint64_t first = UINT64_MAX;
  if (const std::vector<size_t>* v = by_address(device))
    for (auto it = first_at(*v, start); it != v->end() && ctx_.blocks[*it].address < end; ++it)
      if (const uint64_t a = ctx_.blocks[*it].alloc_ns; a >= seg->time_ns)
        first = std::min(first, a);
  return first == UINT64_MAX ? seg->time_ns : first;
}

bool TorchMemory::is_segment(uint32_t device, uint64_t address) const {
  for (const TorchReserve& x : ctx_.reserves)
    if (x.device == device && x.address == address && x.delta > 0) return true;
  return false;
}

uint64_t TorchMemory::private_reserved_at(uint32_t device, uint64_t t) const {
  uint64_t r = 0;
  for (size_t s = 0; s < ctx_.pool_segments.size(); ++s)
    if (ctx_.pool_segments[s].device == device && pool_segment_ns_[s] <= t)
      r += ctx_.pool_segments[s].bytes;
  return r;
}

uint64_t TorchMemory::first_block_at(uint32_t device, uint64_t address, uint64_t from_ns) const {
  uint64_t first = UINT64_MAX;
  const std::vector<size_t>* found = by_address(device);
  if (!found) return first;
  for (auto it = first_at(*found, address);
       it != found->end() && ctx_.blocks[*it].address == address; ++it)
    if (ctx_.blocks[*it].alloc_ns >= from_ns) first = std::min(first, ctx_.blocks[*it].alloc_ns);
  return first;
}

bool TorchMemory::in_cuda_graph_pool(const BlockInfo& b) const {
  if (&b < info_.data() || &b >= info_.data() + info_.size()) return false;
  const int64_t s = pool_segment_of_[static_cast<size_t>(&b - info_.data())];
  return s >= 0 && ctx_.pool_segments[static_cast<size_t>(s)].cuda_graph;
}

std::vector<PrivatePool> TorchMemory::private_pools(uint32_t device) const {
  std::vector<PrivatePool> out;
  std::vector<size_t> pool_of(ctx_.pool_segments.size(), SIZE_MAX);
  for (size_t s = 0; s < ctx_.pool_segments.size(); ++s) {
    const TorchPoolSegment& g = ctx_.pool_segments[s];
    if (g.device != device) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const PrivatePool& p) {
      return p.pool_id[0] == g.pool_id[0] && p.pool_id[1] == g.pool_id[1];
    });
    if (it == out.end()) {
      out.push_back({{g.pool_id[0], g.pool_id[1]}, false, 0, 0, 0});
      it = out.end() - 1;
    }
    it->cuda_graph = it->cuda_graph || g.cuda_graph;
    ++it->segments;
    it->bytes += g.bytes;
    pool_of[s] = static_cast<size_t>(it - out.begin());
  }
  for (size_t i = 0; i < ctx_.blocks.size(); ++i)
    if (pool_segment_of_[i] >= 0 && ctx_.blocks[i].free_ns == UINT64_MAX &&
        pool_of[static_cast<size_t>(pool_segment_of_[i])] != SIZE_MAX)
      out[pool_of[static_cast<size_t>(pool_segment_of_[i])]].in_use_bytes += ctx_.blocks[i].bytes;
  return out;
}

std::vector<CategoryBytes> TorchMemory::series(uint32_t device,
                                               const std::vector<uint64_t>& times) const {
  std::vector<CategoryBytes> out(times.size(), CategoryBytes{});
  const auto events = lifetime_events(&device);
  CategoryBytes now{};
  int64_t reserved = 0;
  size_t e = 0, r = 0, g = 0;
  std::vector<std::pair<uint64_t, uint64_t>> pool_segments;  // made, bytes
  for (size_t s = 0; s < ctx_.pool_segments.size(); ++s)
    if (ctx_.pool_segments[s].device == device)
      pool_segments.push_back({pool_segment_ns_[s], ctx_.pool_segments[s].bytes});
  std::sort(pool_segments.begin(), pool_segments.end());
  uint64_t pools = 0;
  for (size_t k = 0; k < times.size(); ++k) {
    for (; e < events.size() && events[e].first <= times[k]; ++e) {
      const int64_t v = events[e].second;
      const size_t i = static_cast<size_t>(v > 0 ? v : -v) - 1;
      uint64_t& slot = now[static_cast<size_t>(info_[i].category)];
      slot = v > 0 ? slot + ctx_.blocks[i].bytes : slot - std::min(slot, ctx_.blocks[i].bytes);
    }
    for (; r < ctx_.reserves.size() && ctx_.reserves[r].time_ns <= times[k]; ++r)
      if (ctx_.reserves[r].device == device) reserved += ctx_.reserves[r].delta;
    for (; g < pool_segments.size() && pool_segments[g].first <= times[k]; ++g)
      pools += pool_segments[g].second;
    out[k] = now;
    out[k][static_cast<size_t>(Category::AllocatorCache)] =
        reserved > 0 ? static_cast<uint64_t>(reserved) : 0;
    uint64_t& pool = out[k][static_cast<size_t>(Category::PrivatePool)];
    pool = std::max(pool, pools);
  }
  return out;
}

std::string TorchMemory::module_name(uint32_t module) const {
  if (module == 0 || module > ctx_.modules.size()) return {};
  return ctx_.modules[module - 1].name;
}

std::string TorchMemory::site_text(uint32_t site) const {
  if (site == 0 || site > ctx_.sites.size()) return {};
  const TorchSite& s = ctx_.sites[site - 1];
  std::string file = s.file;
  return file + ":" + std::to_string(s.line);
}

std::string TorchMemory::describe(const BlockInfo& b) const {
  std::string where = site_text(b.site);
  if (b.label >= 0) {
    const TorchLabel& l = ctx_.labels[static_cast<size_t>(b.label)];
    const char* what = l.kind == "grad"     ? "gradient "
                       : l.kind == "state"  ? "optimizer state "
                       : l.kind == "buffer" ? "buffer "
                                            : "parameter ";
    return what + l.name + (where.empty() ? "" : " at " + where);
  }
  if (b.category == Category::Unclassified)
    return ctx_.window_start.empty() && !ctx_.gaps.empty()
               ? "made while PyTorch's trace was off, between the sampled iterations "
                 "(--torch=full records every block)"
               : "made before the earliest entry of PyTorch's trace (VRAMTRACE_TORCH_MAX_ENTRIES)";
  std::string text;
  if (b.module && b.module <= ctx_.modules.size()) {  // a damaged file may name no module
    const TorchModule& m = ctx_.modules[b.module - 1];
    text = m.name + (m.name == m.type ? "" : " (" + m.type + ")");
  } else {
    text = b.phase == TorchPhase::Backward    ? "backward"
           : b.phase == TorchPhase::Optimizer ? "optimizer step"
           : b.phase == TorchPhase::None
               ? (b.site ? "moved to the GPU" : "outside forward, backward and step")
               : "forward";
  }
  if (!where.empty()) text += " at " + where;
  return text;
}

}  // namespace vramtrace::collector

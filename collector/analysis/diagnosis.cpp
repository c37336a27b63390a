// The effective limit and PyTorch remedies with their savings (see diagnosis.h).
#include "collector/analysis/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "collector/model/allocation.h"
#include "common/bytes_text.h"

namespace vramtrace::collector {
namespace {

uint64_t of(const CategoryBytes& c, Category k) { return c[static_cast<size_t>(k)]; }

std::vector<Allocation> driver_only(const std::vector<Allocation>& v) {
  std::vector<Allocation> out;
  for (const auto& a : v)
    if (a.space == 0) out.push_back(a);
  return out;
}

// When the device's peak is read: just after the allocator's block that the peak's segment
// was made for (see TorchMemory::after_segment), else the driver's peak itself.
uint64_t segment_moment(const TorchMemory& tm, const DeviceModel& d) {
  // A peak while PyTorch's trace was off (--torch=sampled): its block is not known.
  if (gap_at(tm.context(), d.index, d.memory.peak_time())) return d.memory.peak_time();
  for (const auto& a : d.live_at_peak)
    if (a.seq == d.memory.peak_seq() && a.space == 0)
      return tm.after_segment(d.index, a.id, d.memory.peak_time());
  return d.memory.peak_time();
}

}  // namespace

EffectiveLimit effective_limit(uint64_t device_total, const TorchMemory* tm, uint32_t device,
                               std::optional<uint64_t> held_by_others) {
  EffectiveLimit l{device_total, "device", "the GPU's capacity (" + gib_text(device_total) + ")"};
  if (tm) {
    auto it = tm->context().limits.find(device);
    if (it != tm->context().limits.end() && it->second.fraction < 1.0) {
      const uint64_t total = it->second.total_bytes ? it->second.total_bytes : device_total;
      const auto cap = static_cast<uint64_t>(it->second.fraction * static_cast<double>(total));
      if (cap < l.bytes) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "PyTorch's per-process memory fraction (%.4g of %s: %s)",
                      it->second.fraction, gib_text(total).c_str(), gib_text(cap).c_str());
        l = {cap, "per_process_fraction", buf};
      }
    }
  }
  if (tm) {
    // JAX: XLA's allocator serves arrays from its pool, whose limit is the program's.
    auto it = tm->context().xla.find(device);
    if (it != tm->context().xla.end() && it->second.limit && it->second.limit < l.bytes) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "XLA's memory pool (%s, %.0f%% of the GPU: XLA_PYTHON_CLIENT_MEM_FRACTION)",
                    gib_text(it->second.limit).c_str(),
                    device_total ? 100.0 * static_cast<double>(it->second.limit) /
                                       static_cast<double>(device_total)
                                 : 0.0);
      l = {it->second.limit, "xla_pool", buf};
    }
  }
  if (held_by_others && device_total > *held_by_others &&
      device_total - *held_by_others < l.bytes && *held_by_others >= (1ull << 30)) {
    const uint64_t left = device_total - *held_by_others;
    l = {left, "other_processes",
         "what other processes left of the GPU (" + gib_text(*held_by_others) + " held by them, " +
             gib_text(left) + " left)"};
  }
  return l;
}

namespace {

// Checkpointing the modules that hold the most activations (at least two of them), or none.
std::optional<Remedy> checkpointing_remedy(const RemedyInput& in, uint64_t act) {
  // Checkpointing the largest modules keeps only their inputs; recomputing needs one
  // module's activations at a time.
  uint64_t sum = 0, largest = 0;
  std::vector<ModuleBytes> picked;
  for (const ModuleBytes& m : in.activations_by_module) {
    if (picked.size() == 6 || m.bytes * 20 < act) break;
    sum += m.bytes;
    largest = std::max(largest, m.bytes);
    picked.push_back(m);
  }
  // Named as the model runs them.
  std::sort(picked.begin(), picked.end(),
            [](const ModuleBytes& a, const ModuleBytes& b) { return a.first_call < b.first_call; });
  std::string names;
  std::vector<std::string> chosen;
  for (const ModuleBytes& m : picked) {
    names += (names.empty() ? "" : ", ") + m.name;
    chosen.push_back(m.name);
  }
  const size_t n = picked.size();
  if (n < 2 || sum <= largest) return std::nullopt;
  Remedy r{RemedyKind::ActivationCheckpointing,
           "Checkpoint the modules that hold the most activations: " + names, sum - largest,
           "each checkpointed module keeps only its input and recomputes the rest "
           "in backward, one module at a time",
           "torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False)"};
  r.modules = chosen;
  return r;
}

// Halving the batch: what scales with it (`per_batch`), and how large a batch fits the limit
// given what does not (`need`: the moment's whole demand; `model_state`).
Remedy smaller_batch_remedy(const RemedyInput& in, uint64_t per_batch, uint64_t need,
                            uint64_t model_state) {
  const uint64_t fixed = std::max(need > per_batch ? need - per_batch : 0, model_state);
  Remedy r{RemedyKind::SmallerBatch,
           "Halve the batch (with gradient accumulation to keep its effect)", per_batch / 2,
           "activations, temporaries and inputs scale with the batch; parameters, gradients "
           "and optimizer state do not",
           ""};
  if (fixed < in.limit) {
    const double f = static_cast<double>(in.limit - fixed) / static_cast<double>(per_batch);
    char buf[200];
    if (f < 1.0)
      std::snprintf(buf, sizeof buf,
                    "the largest batch that fits the limit is about %.0f%% of "
                    "this one",
                    f * 100.0 > 99 ? 99.0 : f * 100.0);
    else
      std::snprintf(buf, sizeof buf, "this batch fits; up to about %.1fx of it would", f);
    r.how = buf;
    if (in.partial_step)
      r.how = "the job died " + (in.progress.empty() ? "in its first step" : in.progress) +
              ", so a whole step needs more than this floor: measure it with `vramtrace run " +
              "-- " + (in.command.empty() ? "<your command>" : in.command) + "` at half the batch";
  } else {
    r.how = "parameters, gradients and optimizer state alone exceed the limit: no batch fits";
  }
  return r;
}

}  // namespace

Remedy no_grad_remedy(NoGradFor why, uint64_t bytes, uint64_t activations) {
  Remedy r{RemedyKind::NoGrad, "Evaluate under torch.no_grad() (or torch.inference_mode())", bytes,
           "", ""};
  switch (why) {
    case NoGradFor::EvaluationForwards:
      r.assumption = "evaluation forwards ran with autograd on and kept their graphs alive";
      r.how = "with torch.no_grad(): out = model(x); total += out.item()";
      break;
    case NoGradFor::KeptGraphs:
      r.assumption =
          "no backward follows these forwards, so their graphs are never needed; without "
          "autograd each forward frees its activations as it goes";
      r.how = "with torch.no_grad(): out = model(x)";
      break;
    case NoGradFor::CarriedState:
      r.title =
          "When no training is meant, run the forwards under torch.no_grad() (or "
          "torch.inference_mode())";
      r.assumption = human_bytes(activations) +
                     " of what is kept are activations autograd saved for a backward that never "
                     "ran; without autograd no forward saves them, and the state holds no graph";
      r.how = "with torch.no_grad(): out = model(x, state)";
      break;
  }
  return r;
}

std::vector<Remedy> pytorch_remedies(const RemedyInput& in) {
  std::vector<Remedy> out;
  const uint64_t act = of(in.at, Category::Activations);
  const uint64_t tmp = of(in.at, Category::Temporaries);
  const uint64_t inputs = of(in.at, Category::Inputs);
  const uint64_t params = of(in.at, Category::Parameters);
  const uint64_t grads = of(in.at, Category::Gradients);
  const uint64_t state = of(in.at, Category::OptimizerState);
  const uint64_t cache = of(in.at, Category::AllocatorCache);
  const uint64_t need = in.total + in.request;  // what the moment asked for in all
  // An OOM in the first step's optimizer.step() comes while the optimizer is making its state:
  // the whole of it is a tensor per gradient per state kind (Adam: two), not what it had made.
  const uint64_t full_state = std::max(state, grads * in.optimizer_state_per_param);
  const uint64_t model_state = params + grads + full_state;

  if (act + tmp && !in.autocast && (in.param_dtype.empty() || in.param_dtype == "float32"))
    out.push_back({RemedyKind::MixedPrecision,
                   "Run the forward in bf16 mixed precision (torch.autocast)", (act + tmp) / 2,
                   "activations and temporaries (convolution and matmul workspaces among them) "
                   "are float32 now and bf16 halves them",
                   "with torch.autocast(\"cuda\", dtype=torch.bfloat16): loss = ..."});

  if (act && in.activations_by_module.size() >= 2)
    if (auto r = checkpointing_remedy(in, act)) out.push_back(*r);

  const uint64_t per_batch = act + tmp + inputs;
  if (per_batch && in.limit) out.push_back(smaller_batch_remedy(in, per_batch, need, model_state));

  if (state) {
    out.push_back({RemedyKind::LeanerOptimizer, "Use an optimizer with less state",
                   in.optimizer_state_per_param >= 2 ? full_state / 2 : full_state,
                   in.optimizer_state_per_param >= 2
                       ? "Adam-like optimizers keep two tensors per parameter; SGD with momentum, "
                         "or Adafactor, keeps one"
                       : "SGD without momentum keeps no state",
                   in.optimizer_state_per_param >= 2
                       ? "torch.optim.SGD(params, momentum=0.9), or an 8-bit optimizer (about 3/4 "
                         "saved)"
                       : "torch.optim.SGD(params, momentum=0)"});
  }

  if (in.fragmented && cache)
    out.push_back({RemedyKind::ExpandableSegments,
                   "Let PyTorch grow segments instead of stranding free pieces", cache,
                   "the allocator's free memory was there but in pieces smaller than the request",
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"});

  if (in.eval_activations)
    out.push_back(no_grad_remedy(NoGradFor::EvaluationForwards, in.eval_activations));

  if (in.limit && model_state >= in.limit)
    out.push_back(
        {RemedyKind::Offload,
         "Shard or offload: parameters, gradients and optimizer state alone exceed the "
         "limit",
         model_state - std::min(model_state, in.limit / 2),
         "model state is the floor that no batch size removes",
         "FSDP across GPUs, or optimizer state on the CPU (e.g. DeepSpeed ZeRO-Offload)"});

  std::stable_sort(out.begin(), out.end(),
                   [](const Remedy& a, const Remedy& b) { return a.saves_bytes > b.saves_bytes; });
  if (in.partial_step)
    for (Remedy& r : out) r.lower_bound = true;
  return out;
}

std::string first_step_progress(const TorchMemory& tm, uint64_t t) {
  const PhaseSpan* ph = tm.phase_at(t);
  std::string where = ph && ph->phase == TorchPhase::Backward    ? "in its first backward"
                      : ph && ph->phase == TorchPhase::Optimizer ? "in its first optimizer step"
                                                                 : "in its first forward";
  const auto& ctx = tm.context();
  std::vector<bool> ran(ctx.modules.size() + 1, false);
  size_t n = 0;
  for (const TorchMark& m : ctx.marks) {
    if (m.time_ns > t) break;
    const bool call = m.kind == MarkKind::Module || m.kind == MarkKind::Forward ||
                      m.kind == MarkKind::ForwardEval || m.kind == MarkKind::ForwardEvalGrad;
    if (call && m.id < ran.size() && !ran[m.id]) {
      ran[m.id] = true;
      ++n;
    }
  }
  if (const uint32_t mod = tm.module_at(t)) where += ", in " + tm.module_name(mod);
  if (n && !ctx.modules.empty() && (!ph || ph->phase != TorchPhase::Optimizer))
    where += ", after " + std::to_string(n) + " of the model's " +
             std::to_string(ctx.modules.size()) + " modules had run";
  return where;
}

std::vector<Remedy> native_remedies(const NativeRemedyInput& in) {
  std::vector<Remedy> out;
  if (in.grown_bytes) {
    out.push_back({RemedyKind::FreePerIteration,
                   "Free or reuse the memory allocated at " + in.growth_site + " each iteration",
                   in.grown_bytes,
                   "it kept " + gib_text(in.bytes_per_iteration) +
                       " per iteration that no later iteration freed",
                   "cudaFree (or cudaFreeAsync) it when the iteration is done, or allocate one "
                   "buffer before the loop and reuse it"});
    // At an OOM the failed request is the next iteration's buffer, which the fix still needs; at
    // a peak the last iteration's is part of what grew, and still needed too.
    const uint64_t base = in.needed ? in.needed : in.peak;
    out.back().predicted_peak =
        base - std::min(base, in.grown_bytes) + (in.needed ? 0 : in.bytes_per_iteration);
  }
  if (in.fragmented)
    out.push_back({RemedyKind::PoolRelease,
                   "Size the pool's blocks for the largest request, or let it release free memory",
                   0, "the pool's free memory was there, in pieces smaller than the request",
                   "cudaMallocAsync with cudaMemPoolAttrReleaseThreshold, and allocate the "
                   "long-lived buffers first"});
  if (in.needed > in.limit && in.limit) {
    Remedy r{
        RemedyKind::SmallerWorkingSet,
        "Use a smaller working set: process the data in chunks, or keep fewer buffers live "
        "at once",
        in.needed - in.limit,
        "what the program held with its last request exceeded the limit by this much: at least "
        "that must go for it to fit",
        "split the largest buffers (or the batch) into chunks processed in turn"};
    r.predicted_peak = in.limit;
    r.upper_bound = true;
    r.leaves_growth = in.grown_bytes > 0;
    out.push_back(r);
  }
  return out;
}

namespace {

// Sums bytes by name (a module's first call: its earliest member's), largest first, equal
// bytes in the model's order.
class ModuleSums {
 public:
  void add(const std::string& name, uint64_t bytes, uint32_t first_call) {
    ModuleBytes& m = by_name_[name];
    m.bytes += bytes;
    m.first_call = m.name.empty() ? first_call : std::min(m.first_call, first_call);
    m.name = name;
  }
  std::vector<ModuleBytes> largest_first() const {
    std::vector<ModuleBytes> v;
    for (const auto& [name, m] : by_name_) v.push_back(m);
    std::sort(v.begin(), v.end(), [](const ModuleBytes& a, const ModuleBytes& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.first_call < b.first_call;
    });
    return v;
  }

 private:
  std::map<std::string, ModuleBytes> by_name_;
};

}  // namespace

std::vector<ModuleBytes> live_by_module(const TorchMemory& tm, uint32_t device, uint64_t t,
                                        bool activations_only) {
  ModuleSums m;
  for (size_t i : tm.live_at(device, t)) {
    const auto& b = tm.info()[i];
    if (!b.module) continue;
    if (activations_only && b.category != Category::Activations) continue;
    if (b.category != Category::Activations && b.category != Category::Temporaries) continue;
    m.add(tm.module_name(b.module), tm.context().blocks[i].bytes, b.module);
  }
  return m.largest_first();
}

std::vector<ModuleBytes> checkpoint_groups(const std::vector<ModuleBytes>& mods, uint64_t total) {
  for (int depth = 1; depth <= 4; ++depth) {
    ModuleSums g;
    for (const ModuleBytes& m : mods) {
      size_t pos = 0;
      for (int k = 0; k < depth && pos != std::string::npos; ++k)
        pos = m.name.find('.', pos ? pos + 1 : 0);
      g.add(pos == std::string::npos ? m.name : m.name.substr(0, pos), m.bytes, m.first_call);
    }
    std::vector<ModuleBytes> v = g.largest_first();
    // Several groups, none holding nearly everything.
    if (v.size() >= 3 && v[0].bytes * 10 < total * 7) return v;
  }
  return {};
}

PeakMoment peak_moment_of(const TorchMemory& tm, const DeviceModel& d) {
  const uint64_t seg_t = segment_moment(tm, d);
  // A device's peak while PyTorch's trace was off (--torch=sampled): shown there, what is not
  // known unclassified, unless the run was steady: PyTorch's in-use peak in the traced
  // iterations within 1 % of its peak between them is the same iteration's memory, read
  // where the trace was on (a late workspace can put the device's peak in a gap).
  bool in_gap = gap_at(tm.context(), d.index, seg_t) != nullptr;
  // At a gap's end its blocks appear all at once (made while the trace was off): a peak of
  // PyTorch's there was not traced either.
  bool traced = d.allocator_peak_time && !gap_at(tm.context(), d.index, d.allocator_peak_time);
  for (const TorchGap& g : tm.context().gaps)
    if (g.device == d.index && g.end_ns == d.allocator_peak_time) traced = false;
  if (in_gap && traced) {
    const std::optional<TorchGap> g = gap_of_peak(tm.context(), d.index);
    const uint64_t between = g && g->end_peak ? *g->end_peak : 0;
    in_gap = d.allocator_peak_in_use < between - between / 100;
  }
  if (!d.allocator_peak_time || d.allocator_peak_time == seg_t || in_gap)
    return {seg_t, d.memory.peak_bytes(), "the device's peak"};
  // Memory outside PyTorch's allocator is taken as it was at the device's peak.
  const uint64_t reserved_then = tm.reserved_at(d.index, seg_t);
  const uint64_t outside = d.memory.peak_bytes() - std::min(d.memory.peak_bytes(), reserved_then);
  const uint64_t t = d.allocator_peak_time;
  return {t, tm.reserved_at(d.index, t) + outside, "PyTorch's in-use peak", true};
}

// Adam's "step" is a CPU tensor, never labelled.
uint64_t state_tensors_per_param(const TorchMemory& tm) {
  std::map<std::string, uint64_t> per;
  for (const auto& l : tm.context().labels)
    if (l.kind == "state") per[l.name.substr(0, l.name.rfind('.'))]++;
  uint64_t most = 0;
  for (auto& [k, n] : per) most = std::max(most, n);
  return most;
}

CategoryBytes categories_at_peak(const TorchMemory& tm, const DeviceModel& d, const PeakMoment& pm,
                                 StackResolver* stacks) {
  return categorize(tm, d.index, pm.time_ns, pm.device_bytes, driver_only(d.live_at_peak), stacks);
}

CategoryBytes categories_at_oom(const TorchMemory& tm, const OomEvent& o, StackResolver* stacks) {
  return categorize(tm, o.device, o.time_ns, o.live_bytes, driver_only(o.live), stacks);
}

RemedyInput remedy_input(const TorchMemory& tm, uint32_t device, uint64_t t,
                         const CategoryBytes& at, uint64_t limit, uint64_t request,
                         bool fragmented) {
  RemedyInput in;
  in.at = at;
  for (uint64_t v : at) in.total += v;
  in.limit = limit;
  in.request = request;
  in.fragmented = fragmented;
  in.autocast = tm.autocast();
  // A first-step OOM: the moment came before any optimizer step ended.
  // (A job without an optimizer, an evaluation, is in its first step only in its first forward.)
  in.partial_step =
      request && tm.optimizer_steps() == 0 && !tm.iterations().empty() && tm.iteration_at(t) <= 0;
  auto acts = live_by_module(tm, device, t, true);
  uint64_t act_total = 0;
  for (const ModuleBytes& m : acts) act_total += m.bytes;
  in.activations_by_module = checkpoint_groups(acts, act_total);
  for (size_t i : tm.live_at(device, t)) {
    const auto& b = tm.info()[i];
    if (b.category == Category::Activations && b.phase == TorchPhase::Evaluation)
      in.eval_activations += tm.context().blocks[i].bytes;
    if (b.label >= 0 && in.param_dtype.empty() &&
        tm.context().labels[static_cast<size_t>(b.label)].kind == "param")
      in.param_dtype = tm.context().labels[static_cast<size_t>(b.label)].dtype;
  }
  in.optimizer_state_per_param = state_tensors_per_param(tm);
  return in;
}

}  // namespace vramtrace::collector

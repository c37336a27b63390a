// The remedies as changes of the request stream (see transforms.h).
#include "collector/predict/transforms.h"

#include <algorithm>
#include <unordered_map>

#include "collector/ingest/torch_trace.h"

namespace vramtrace::collector {

std::string to_bf16_autocast(RequestStream& s, bool autocast) {
  if (autocast) return "the forwards already ran under torch.autocast";
  if (!s.categorized) return "the memory's categories are not known (no nn.Module seen)";
  uint64_t changed = 0;
  for (Request& q : s.requests) {
    const bool made_by_pass = q.phase == TorchPhase::Forward || q.phase == TorchPhase::Backward;
    const bool per_sample =
        q.category == Category::Activations || q.category == Category::Temporaries;
    // The request the run failed on has no category: made in a forward or backward, it is
    // one of theirs.
    const bool failed_in_pass = q.op == RequestOp::RecordedOom && made_by_pass;
    if ((q.op == RequestOp::Malloc && made_by_pass && per_sample) || failed_in_pass) {
      q.bytes = (q.bytes + 1) / 2;
      ++changed;
    }
  }
  return changed ? "" : "no activations or temporaries were made in a forward or backward";
}

std::string checkpoint_modules(RequestStream& s, const TorchContext& ctx,
                               const std::vector<std::string>& modules) {
  // Which checkpointed module each module id lies in (-1: none).
  std::vector<int> group(ctx.modules.size() + 1, -1);
  bool any = false;
  for (size_t id = 1; id <= ctx.modules.size(); ++id)
    for (size_t g = 0; g < modules.size(); ++g) {
      const std::string& name = ctx.modules[id - 1].name;
      if (name == modules[g] || name.rfind(modules[g] + ".", 0) == 0) {
        group[id] = static_cast<int>(g);
        any = true;
      }
    }
  if (!any) return "none of the modules named was seen running";
  auto& q = s.requests;
  constexpr size_t kNever = SIZE_MAX;
  std::vector<size_t> free_at(s.blocks, kNever);  // block -> index of its free
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i].op == RequestOp::Free && q[i].block < free_at.size()) free_at[q[i].block] = i;
  auto freed_at = [&](uint32_t block) { return block < free_at.size() ? free_at[block] : kNever; };
  // What goes in before and after request i, as (i, request): sorted by i at the end, each
  // i's in the order they were put in.
  std::vector<std::pair<size_t, Request>> before, after;
  std::vector<uint32_t> rename(q.size(), UINT32_MAX);  // an original free's new block
  uint64_t moved = 0;
  // A span: one call of a checkpointed module in a forward, as the run of its requests.
  auto close = [&](const std::vector<size_t>& made, size_t end) {
    std::vector<size_t> acts;
    for (size_t i : made)
      if (q[i].category == Category::Activations) acts.push_back(i);
    if (acts.size() < 2) return;
    acts.pop_back();  // its output: the input of what comes next, kept
    size_t recompute = SIZE_MAX;
    for (size_t i : acts) {
      Request f = q[i];
      f.op = RequestOp::Free;
      after.emplace_back(end, f);
      ++moved;
      recompute = std::min(recompute, freed_at(q[i].block));
    }
    if (recompute == kNever) return;  // the run never got to the backward
    for (size_t i : acts) {
      const size_t freed = freed_at(q[i].block);
      if (freed == kNever) continue;
      Request m = q[i];
      m.time_ns = q[recompute].time_ns;
      m.block = s.blocks++;
      rename[freed] = m.block;
      before.emplace_back(recompute, m);
    }
  };
  std::vector<size_t> made;
  int cur = -1;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i].op != RequestOp::Malloc) continue;
    const int g =
        q[i].phase == TorchPhase::Forward && q[i].module < group.size() ? group[q[i].module] : -1;
    const bool same = g == cur && !made.empty() && q[made.back()].iteration == q[i].iteration;
    if (!same) {
      if (cur >= 0 && !made.empty()) close(made, made.back());
      made.clear();
      cur = g;
    }
    if (g >= 0) made.push_back(i);
  }
  if (cur >= 0 && !made.empty()) close(made, made.back());
  if (!moved) return "the modules named kept no activations in a training forward";
  auto by_index = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::stable_sort(before.begin(), before.end(), by_index);
  std::stable_sort(after.begin(), after.end(), by_index);
  std::vector<Request> out;
  out.reserve(q.size() + before.size() + after.size());
  size_t b = 0, a = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    for (; b < before.size() && before[b].first == i; ++b) out.push_back(before[b].second);
    out.push_back(q[i]);
    if (rename[i] != UINT32_MAX) out.back().block = rename[i];
    for (; a < after.size() && after[a].first == i; ++a) out.push_back(after[a].second);
  }
  q = std::move(out);
  return "";
}

std::string without_blocks(RequestStream& s, const std::unordered_set<size_t>& blocks) {
  if (blocks.empty()) return "no blocks were kept across iterations";
  auto& q = s.requests;
  const size_t n = q.size();
  q.erase(std::remove_if(q.begin(), q.end(),
                         [&](const Request& r) {
                           return r.op != RequestOp::RecordedOom && !r.predicted &&
                                  blocks.count(r.block);
                         }),
          q.end());
  return q.size() < n ? "" : "none of the kept blocks was made on this device";
}

}  // namespace vramtrace::collector

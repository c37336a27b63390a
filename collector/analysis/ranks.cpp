// Each rank's peak, the worst rank and the ranks' spread (see ranks.h).
#include "collector/analysis/ranks.h"

#include <algorithm>
#include <cstdlib>

#include "collector/analysis/json_text.h"
#include "collector/model/model.h"

namespace vramtrace::collector {

namespace {

std::optional<std::string> rank_of(const ProcessModel& p) {
  for (const char* key : kRankVariables)
    for (const auto& [k, v] : p.ranks)
      if (k == key) return v;
  return std::nullopt;
}

// A rank as report.json writes it, to order ranks that are not both numbers the way the
// report's readers see them.
std::string written(const RankValue& v) {
  return v.number ? std::to_string(*v.number) : json_text(v.text);
}

}  // namespace

RankValue rank_value(const std::string& text) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (!text.empty() && end && *end == '\0') return {v, text};
  return {std::nullopt, text};
}

Ranks ranks_of(const Run& run) {
  Ranks out;
  for (size_t i = 0; i < run.processes.size(); ++i) {
    const ProcessModel& p = run.processes[i];
    auto rank = rank_of(p);
    if (!rank) continue;
    RankPeak r;
    r.process = i;
    r.rank = rank_value(*rank);
    for (const auto& [index, d] : p.devices)
      if (d.memory.peak_bytes() > r.peak_bytes) {
        r.peak_bytes = d.memory.peak_bytes();
        r.peak_device = index;
      }
    for (const auto& [k, v] : p.ranks) {
      if (k == "LOCAL_RANK") r.local_rank = rank_value(v);
      if (k == "WORLD_SIZE") r.world_size = rank_value(v);
    }
    out.ranks.push_back(std::move(r));
  }
  std::stable_sort(out.ranks.begin(), out.ranks.end(), [](const RankPeak& a, const RankPeak& b) {
    if (a.rank.number && b.rank.number) return *a.rank.number < *b.rank.number;
    // A rank is the process's environment: any bytes, not always UTF-8.
    return written(a.rank) < written(b.rank);
  });
  if (out.ranks.empty()) return out;
  RankSpread s;
  uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
  for (size_t i = 0; i < out.ranks.size(); ++i) {
    const uint64_t b = out.ranks[i].peak_bytes;
    if (b > out.ranks[s.worst].peak_bytes) s.worst = i;
    lo = std::min(lo, b);
    hi = std::max(hi, b);
    sum += b;
  }
  s.min_peak_bytes = lo;
  s.max_peak_bytes = hi;
  s.spread_bytes = hi - lo;
  s.mean_peak_bytes = static_cast<double>(sum) / static_cast<double>(out.ranks.size());
  s.max_over_mean = s.mean_peak_bytes > 0 ? static_cast<double>(hi) / s.mean_peak_bytes : 0.0;
  s.level = imbalance_level(s.max_over_mean);
  out.spread = s;
  return out;
}

}  // namespace vramtrace::collector

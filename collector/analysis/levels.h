// The collector's judgements of a figure, each a level written next to the figure in
// report.json (report/report.schema.json declares them): how close a device's peak came to its
// limit, how fragmented an allocator's free memory was, how uneven the ranks' peaks were, and
// whether the limit is close enough to the peak to be drawn on the chart. The summary, the
// no-script view and the page read the level; none compares the figure itself.
#pragma once

#include <cstdint>

namespace vramtrace::collector {

// A device's peak against its effective limit (the diagnosis' limit on the diagnosed device,
// else the device's capacity): past 90 % "over", past 80 % "near", else "ok"; "unknown"
// without a limit.
enum class HeadroomLevel { Unknown, Ok, Near, Over };
inline constexpr double kHeadroomNear = 0.8, kHeadroomOver = 0.9;
inline HeadroomLevel headroom_level(uint64_t peak_bytes, uint64_t limit_bytes) {
  if (!limit_bytes) return HeadroomLevel::Unknown;
  const double f = static_cast<double>(peak_bytes) / static_cast<double>(limit_bytes);
  return f > kHeadroomOver ? HeadroomLevel::Over
                           : (f > kHeadroomNear ? HeadroomLevel::Near : HeadroomLevel::Ok);
}
inline const char* headroom_level_name(HeadroomLevel l) {
  switch (l) {
    case HeadroomLevel::Ok: return "ok";
    case HeadroomLevel::Near: return "near";
    case HeadroomLevel::Over: return "over";
    default: return "unknown";
  }
}

// An allocator's free memory: "high" when its external fragmentation (1 - largest free block /
// free bytes) is past one half, else "ok".
enum class FragmentationLevel { Ok, High };
inline constexpr double kFragmentationHigh = 0.5;
inline FragmentationLevel fragmentation_level(double external_fragmentation) {
  return external_fragmentation > kFragmentationHigh ? FragmentationLevel::High
                                                     : FragmentationLevel::Ok;
}
inline const char* fragmentation_level_name(FragmentationLevel l) {
  return l == FragmentationLevel::High ? "high" : "ok";
}

// The ranks' peaks: "high" when the largest is past 1.2 times their mean, else "ok".
enum class ImbalanceLevel { Ok, High };
inline constexpr double kImbalanceHigh = 1.2;
inline ImbalanceLevel imbalance_level(double max_over_mean) {
  return max_over_mean > kImbalanceHigh ? ImbalanceLevel::High : ImbalanceLevel::Ok;
}
inline const char* imbalance_level_name(ImbalanceLevel l) {
  return l == ImbalanceLevel::High ? "high" : "ok";
}

// The chart draws the limit when it is at most 4 times the chart's top (the device's peak, the
// highest sum of its categories over time, each OOM's live bytes and request): further away, it
// would flatten the memory to the axis.
inline constexpr uint64_t kLimitInChartRatio = 4;
inline bool limit_in_chart(uint64_t limit_bytes, uint64_t top_bytes) {
  return static_cast<double>(limit_bytes) <= static_cast<double>(top_bytes) * kLimitInChartRatio;
}

}  // namespace vramtrace::collector

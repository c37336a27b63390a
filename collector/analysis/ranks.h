// The ranks of a distributed job (torchrun, Slurm, Open MPI, PMI: each process's launcher
// variables): each rank's peak and the device it was on, in rank order, the worst rank and how
// unevenly the ranks' peaks spread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/levels.h"

namespace vramtrace::collector {

struct Run;

// The launcher variables that give a process its rank (torchrun, Slurm, Open MPI, PMI), in the
// order they are looked for.
inline constexpr const char* kRankVariables[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                                                 "PMI_RANK"};

// A rank as its variable held it: a number when the whole value is one, else the text.
struct RankValue {
  std::optional<long> number;
  std::string text;
};
RankValue rank_value(const std::string& text);

struct RankPeak {
  size_t process = 0;  // index in Run::processes
  RankValue rank;
  uint64_t peak_bytes = 0;   // its largest peak on any of its devices
  uint32_t peak_device = 0;  // that device
  std::optional<RankValue> local_rank, world_size;
};

// The ranks' peaks against each other (when any process has a rank).
struct RankSpread {
  size_t worst = 0;  // index in Ranks::ranks: the first with the largest peak
  uint64_t min_peak_bytes = 0, max_peak_bytes = 0, spread_bytes = 0;
  double mean_peak_bytes = 0, max_over_mean = 0;
  ImbalanceLevel level = ImbalanceLevel::Ok;  // levels.h: max / mean past 1.2
};

struct Ranks {
  // In rank order: by number when both are numbers, else as report.json writes them.
  std::vector<RankPeak> ranks;
  std::optional<RankSpread> spread;
};
Ranks ranks_of(const Run& run);

}  // namespace vramtrace::collector

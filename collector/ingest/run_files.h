// A run's files: what each file of a run folder is by its name (a trace, a start-up hook's side
// channel), the pid a trace's name carries, where a trace being written ends in whole frames,
// and open_run(), the one place a run's files are opened for the model (by `report`, `run`,
// `whatif`, `check` and the report of a moment).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/ingest/trace_reader.h"

namespace vramtrace::collector {

// A start-up hook's side channel by its name: vramtrace.<pid>.torch (PyTorch) or .jax (JAX).
bool is_side_channel(const std::string& path);
// A file a run writes, by its name: a trace (vramtrace.<...>.vtrace) or a side channel.
bool is_run_file(const std::string& path);
// Whether the file begins as a trace does (its magic), whatever its name.
bool starts_as_trace(const std::string& path);
// The launcher names each stream's file after the peer's pid (vramtrace.<pid>[-k].vtrace): that
// pid, 0 when the name is not one of these.
uint64_t pid_in_trace_name(const std::string& path);

// Where a trace that is being written ends for a reader of this moment: the end of its last
// whole frame at or after `from` (a frame boundary found before; 0: from the start), or the
// file's size when a frame header there is not one (a damaged trace: the reader says so).
// 0 while it has no whole frame (from 0).
uint64_t whole_frames_end(const std::string& path, uint64_t from = 0);

// A run's files, opened: the traces' readers in the order given, the side channels' paths
// (read with their process's trace by the merge), and, for each trace that could not be opened,
// why (a TraceError's message).
struct RunFiles {
  std::vector<std::unique_ptr<TraceReader>> traces;
  std::vector<std::string> side_channels;
  std::vector<std::string> problems;
  uint64_t trace_bytes = 0;  // the opened traces' sizes on disk (a progress bar's total)
};
RunFiles open_run(const std::vector<std::string>& paths);

}  // namespace vramtrace::collector

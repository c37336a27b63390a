// A run's files: what each file of a run folder is by its name (a trace, a start-up hook's side
// channel), the pid a trace's name carries, where a trace being written ends in whole frames,
// run_inputs(), the one place that decides which files a run's inputs (files and folders, as a
// user names them) stand for, and open_run(), the one place a run's files are opened for the
// model (by `report`, `run`, `whatif`, `check`, `diff` and the report of a moment).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/trace_reader.h"

namespace vramtrace::collector {

// A start-up hook's side channel by its name: vramtrace.<pid>.torch (PyTorch) or .jax (JAX).
bool is_side_channel(const std::string& path);
// A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle, torch_snapshot.h), by
// its first bytes whatever its name: a run of one process of its own.
bool is_snapshot(const std::string& path);
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

// The files that inputs named by a user stand for: a file itself, a folder's traces (*.vtrace) and
// side channels (vramtrace.<pid>.torch, .jax) sorted by name. One file named twice (or through a
// link) counts once. Every command that reads a run from its traces takes its files from here, so
// that a folder is the same run to `report`, `check`, `diff` and `whatif` (a gate that read a
// folder's traces without their side channels saw no PyTorch categories, and passed budgets on
// them).
struct RunInputs {
  std::vector<std::string> files;
  std::vector<std::string> errors;  // an input that stands for nothing: missing, a folder of none
  std::vector<std::string> notes;   // said, and read on: a file given twice
};
RunInputs run_inputs(const std::vector<std::string>& paths);

// A run's files, opened: the traces' readers in the order given, the side channels' paths
// (read with their process's trace by the merge), and, for each trace that could not be opened,
// why (a TraceError's message). A memory snapshot is read here whole: the process that stands
// for it among the traces, its allocator trace in `snapshots` (merged with that process), and
// what it cannot say in `notes` (an empty history, entries without times: said among the run's
// problems).
struct RunFiles {
  std::vector<std::unique_ptr<TraceReader>> traces;
  std::vector<std::string> side_channels;
  std::vector<TorchTrace> snapshots;
  std::vector<std::string> notes;
  std::vector<std::string> problems;
  uint64_t trace_bytes = 0;  // the opened traces' sizes on disk (a progress bar's total)
};
RunFiles open_run(const std::vector<std::string>& paths);

}  // namespace vramtrace::collector

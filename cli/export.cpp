// `vramtrace export --perfetto|--memory-viz RUN -o FILE`: a recorded run in a format other tools
// open: Chrome's trace event JSON (ui.perfetto.dev, chrome://tracing; report/perfetto.h) or a
// PyTorch memory snapshot (pytorch.org/memory_viz; report/memory_viz.h). Reads RUN, writes FILE
// with the user's permissions only, never over an existing file without --force.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "collector/analysis/analysis.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/memory_viz.h"
#include "report/perfetto.h"

namespace vramtrace::cli {
namespace {

constexpr const char* kWho = "vramtrace export";

struct ExportArgs {
  std::vector<std::string> inputs;
  std::string out;
  bool perfetto = false, memory_viz = false, force = false;
  std::optional<uint64_t> pid;
};

// The process whose allocator the snapshot shows: --pid, else the one PyTorch process, else the
// one process. nullopt (said) when the choice is the user's.
std::optional<size_t> snapshot_process(const collector::Run& run, std::optional<uint64_t> pid) {
  std::vector<size_t> torch, all;
  for (size_t i = 0; i < run.processes.size(); ++i) {
    const auto& p = run.processes[i];
    if (pid && p.pid != *pid) continue;
    all.push_back(i);
    if (p.torch_context && !p.torch_context->blocks.empty()) torch.push_back(i);
  }
  if (torch.size() == 1) return torch[0];
  if (all.size() == 1) return all[0];
  if (all.empty()) {
    std::cerr << kWho << ": no process " << (pid ? "with pid " + std::to_string(*pid) : "")
              << " in the run\n";
    return std::nullopt;
  }
  std::cerr << kWho << ": --memory-viz shows one process's memory, and the run has " << all.size()
            << " (pids";
  for (size_t i : all) std::cerr << " " << run.processes[i].pid;
  std::cerr << "): choose one with --pid\n";
  return std::nullopt;
}

int export_command(const ExportArgs& a) {
  if (a.perfetto == a.memory_viz) {
    std::cerr << kWho << ": give one of --perfetto or --memory-viz\n";
    return kExitUsage;
  }
  const char* option = a.perfetto ? "-o (--perfetto)" : "-o (--memory-viz)";
  if (!output_file_allowed(a.out, option, a.force, a.inputs, kWho)) return kExitUsage;
  bool ok = true;
  std::vector<std::string> files = expand_inputs(a.inputs, &ok);
  if (!ok) return kExitUsage;
  if (const auto runs = runs_of(files); runs.size() > 1) {
    refuse_runs(kWho, runs, "give the traces of one run");
    return kExitUsage;
  }
  collector::Run run;
  try {
    run = collector::model_of(collector::open_run(files));
  } catch (const collector::TraceError& e) {
    std::cerr << kWho << ": " << report::printable(e.what()) << "\n";
    return kExitUsage;
  }
  for (const auto& problem : run.problems)
    std::cerr << kWho << ": warning: " << report::printable(problem) << "\n";
  if (!run.anything_read()) {
    std::cerr << kWho << ": nothing could be read from the input: nothing written\n";
    return kExitUsage;
  }
  const collector::RunAnalysis analysis = collector::analysis_of(run);
  std::string content;
  if (a.perfetto) {
    content = report::perfetto_trace(analysis).dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace);
    content += "\n";
  } else {
    const std::optional<size_t> process = snapshot_process(run, a.pid);
    if (!process) return kExitUsage;
    report::MemoryViz viz;
    try {
      viz = report::memory_viz(analysis, *process);
    } catch (const collector::TraceError& e) {
      std::cerr << kWho << ": " << report::printable(e.what()) << "\n";
      return kExitUsage;
    }
    content = report::pickle::dumps(viz.snapshot);
    std::cerr << kWho << ": pid " << run.processes[*process].pid << ": " << viz.segments
              << " segments at the end, " << viz.events << " actions, from "
              << (viz.pytorch ? "PyTorch's caching allocator" : "the driver's allocations") << "\n";
  }
  if (!write_private_file(a.out, content)) return kExitWriteFailed;
  std::cerr << kWho << ": " << report::printable(a.out) << " written ("
            << (a.perfetto ? "open it in ui.perfetto.dev or chrome://tracing"
                           : "open it in pytorch.org/memory_viz")
            << ")\n";
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  auto* exp = app.add_subcommand(
      "export", "Write a recorded run in a format other tools open: Perfetto, PyTorch memory_viz");
  exp->add_option("run", args->inputs, "The run: its folder, or its trace files")->required();
  exp->add_flag("--perfetto", args->perfetto,
                "Chrome trace event JSON (ui.perfetto.dev, chrome://tracing): memory per device "
                "and by category, OOMs, iterations and phases");
  exp->add_flag("--memory-viz", args->memory_viz,
                "A PyTorch memory snapshot, pickled (pytorch.org/memory_viz): the allocator's "
                "segments, blocks and actions, or a native program's driver allocations");
  exp->add_option("-o,--output", args->out, "The file to write")->required();
  exp->add_option("--pid", args->pid,
                  "--memory-viz: the process to show (needed when the run has several)");
  exp->add_flag("--force", args->force, "Replace an existing output file (never an input)");
  return {exp, [args] { return export_command(*args); }, {}};
}

}  // namespace vramtrace::cli

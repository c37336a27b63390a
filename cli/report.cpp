// `vramtrace report TRACES...`: traces (files or folders) or PyTorch memory snapshots
// (torch.cuda.memory._dump_snapshot's pickle) to report.json and report.html, in a new folder or
// in -o; refuses what is not a trace, counts a process recorded twice once, and does not mix the
// traces of different runs unless --merge.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/gate.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/torch_snapshot.h"
#include "collector/ingest/trace_reader.h"
#include "report/check.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string out;
  bool force = false;
  bool merge = false;
  bool no_progress = false;
};

int report_command(ReportArgs& a) {
  bool ok = true;
  std::vector<std::string> traces = expand_inputs(a.inputs, &ok);
  if (!ok) return 2;
  std::error_code ec;
  if (!a.out.empty() && fs::exists(a.out, ec) && !fs::is_directory(a.out, ec)) {
    std::cerr << "vramtrace: " << report::printable(a.out) << " exists and is not a directory\n";
    return 2;
  }
  // Refuse what is not a trace before writing anything.
  // (PyTorch's allocator traces are read with the trace of their process: a bad one is a
  // problem of the report, not a refusal.)
  std::vector<std::string> kept;
  std::map<std::string, std::string> identities;         // process -> the trace that recorded it
  std::map<std::string, std::vector<std::string>> runs;  // run id -> its traces
  for (const auto& t : traces) {
    std::string run_of_trace;
    bool identified = false;
    // A PyTorch memory snapshot is a run of its own.
    if (collector::is_snapshot(t)) {
      try {  // read once here too, so that a damaged one leaves no empty report folder behind
        collector::read_torch_snapshot(t, 1);
      } catch (const collector::TraceError& e) {
        std::cerr << "vramtrace report: " << report::printable(e.what()) << "\n";
        return 2;
      }
      kept.push_back(t);
      runs["snapshot " + t].push_back(t);
      continue;
    }
    if (!collector::is_side_channel(t)) {
      try {
        collector::TraceReader probe(t);
      } catch (const collector::TraceError& e) {
        std::cerr << "vramtrace report: " << report::printable(e.what()) << "\n";
        return 2;
      }
      // The same process recorded in two files (a copy of a trace): counted once.
      if (auto id = trace_identity(t)) {
        auto [it, added] = identities.try_emplace(id->process, t);
        if (!added) {
          std::cerr << "vramtrace: " << report::printable(t) << ": the same process as "
                    << report::printable(it->second) << ": counted once\n";
          continue;
        }
        run_of_trace = id->run_id;
        identified = true;
      }
    }
    kept.push_back(t);
    if (collector::is_side_channel(t)) continue;  // read with its process's trace, whose run counts
    if (run_of_trace.empty()) run_of_trace = run_of_folder(t);
    // A trace cut before its process record names no run: it is reported as damaged, not
    // taken for a run of an older vramtrace.
    if (!identified && run_of_trace.empty()) continue;
    runs[run_of_trace].push_back(t);
  }
  if (runs.size() > 1 && !a.merge) {
    refuse_runs("vramtrace report", runs, "use --merge to report them together");
    return 2;
  }
  if (a.out.empty()) {
    a.out = new_numbered_dir("report");
    if (a.out.empty()) return 2;
  } else if (!prepare_output_dir(a.out, a.force, false, "vramtrace report")) {
    return 2;
  }
  return write_reports(kept, a.out, {}, nullptr, a.no_progress);
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  auto* rep = app.add_subcommand("report", "Turn traces (files or directories) into reports");
  rep->add_option("traces", args->inputs, "Trace files or directories of them")->required();
  rep->add_option("-o,--output", args->out,
                  "Directory for report.json and report.html (default: a new "
                  "vramtrace-out/report-N); one that holds a report needs --force")
      ->check(folder_name());
  rep->add_flag("--force", args->force, "Replace the report in the -o directory");
  rep->add_flag("--merge", args->merge,
                "Merge traces of different runs (different `vramtrace run` folders) into one "
                "report; refused without it");
  rep->add_flag("--no-progress", args->no_progress, kProgressHelp);
  return {rep, [args] { return report_command(*args); }, {}};
}

}  // namespace vramtrace::cli

// Traces to reports: reads the trace files of a run (with a progress bar on a terminal) and
// writes report.json and report.html together, or neither; used by `run` and `report`.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "collector/analysis/analysis.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/check.h"
#include "report/html_report.h"
#include "report/json_report.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

int write_reports(const std::vector<std::string>& traces, const std::string& out_dir,
                  const report::RunInfo& info, nlohmann::json* report_out, bool no_progress) {
  collector::Run run;
  collector::RunFiles files = collector::open_run(traces);
  {
    cli::ReadProgress progress(files.trace_bytes, cli::ReadProgress::mode_from_env(no_progress));
    if (progress.shown())
      for (auto& r : files.traces) r->on_progress([&progress](uint64_t n) { progress.add(n); });
    run = collector::model_of(std::move(files));
  }  // the bar is cleared before the summary
  // `report` given traces of which nothing could be read (corrupt from their first frame, or
  // only a header: the process was cut off before its first write): there is no report to
  // write, and "no device memory was used" would be a false answer.
  if (info.command.empty() && !traces.empty()) {
    if (!run.anything_read()) {
      for (const auto& problem : run.problems)
        std::cerr << "vramtrace report: " << report::printable(problem) << "\n";
      std::cerr << "vramtrace report: nothing could be read from the input: no report written\n";
      return 2;
    }
  }
  nlohmann::json j = report::to_json(collector::analysis_of(run, info.still_running), info);
  // Both files are written aside and renamed into place only when both are whole: a failure
  // leaves the folder as it was, with no truncated report.
  const std::string path = out_dir + "/report.json", html = out_dir + "/report.html";
  std::string tmp_json = stage_private_file(
      path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::string tmp_html =
      tmp_json.empty() ? std::string() : stage_private_file(html, report::to_html(j));
  bool ok = !tmp_json.empty() && !tmp_html.empty();
  if (ok) ok = commit_private_file(tmp_json, path) && commit_private_file(tmp_html, html);
  if (!ok) {
    if (!tmp_json.empty()) unlink(tmp_json.c_str());
    if (!tmp_html.empty()) unlink(tmp_html.c_str());
  } else {
    // What a later --force may replace: the reports, and a run's own traces in its folder.
    std::vector<std::string> written = {"report.json", "report.html"};
    std::error_code ec;
    if (!info.command.empty())
      for (const auto& t : traces)
        if (fs::equivalent(fs::path(t).parent_path(), out_dir, ec))
          written.push_back(fs::path(t).filename().string());
    record_written(out_dir, written);
  }
  std::cerr << report::summary_text(j);
  if (ok)
    std::cerr << "vramtrace: report: " << report::printable(html) << " (and report.json)\n";
  else
    std::cerr << "vramtrace: ERROR: the report could not be written into "
              << report::printable(out_dir) << " (exit " << kExitWriteFailed << ")\n";
  if (report_out) *report_out = std::move(j);
  return ok ? 0 : kExitWriteFailed;
}

}  // namespace vramtrace::cli

// Helpers shared by the vramtrace subcommands: output directories, private files, reports.
#pragma once

#include <string>
#include <vector>

#include "report/json_report.h"

// Creates DIR (mode 0700) if missing. Prints why and returns false when it cannot.
bool ensure_output_dir(const std::string& dir);

// Writes a file readable by the user only (0600), atomically: into a temporary file in the same
// directory, renamed over PATH once whole (a symlink at PATH is replaced, never followed). On a
// failure (full disk, read-only directory) PATH is left as it was and the reason is printed.
bool write_private_file(const std::string& path, const std::string& content);

// The two halves of write_private_file, for files that must appear together: the temporary
// file written ("" on a failure, printed), then renamed to PATH (false on a failure, printed;
// the temporary file is removed).
std::string stage_private_file(const std::string& path, const std::string& content);
bool commit_private_file(const std::string& tmp, const std::string& path);

// Reads the traces and writes OUT_DIR/report.json and report.html; prints the summary on stderr.
// Returns 0, 74 when the reports could not be written (neither is then left half-written), or
// 2 for `report` (no command in `info`) when nothing could be read from any trace.
// The report's JSON is handed back through `report_out` when it is not null. While reading, a
// progress bar on stderr when it is a terminal (cli/progress.h); `no_progress`: never.
int write_reports(const std::vector<std::string>& traces, const std::string& out_dir,
                  const vramtrace::report::RunInfo& info, nlohmann::json* report_out,
                  bool no_progress = false);

// Trace files named directly or found in directories (*.vtrace). Sets *ok=false on a missing one.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool* ok);

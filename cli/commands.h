// Helpers shared by the vramtrace subcommands: output directories, private files, reports.
#pragma once

#include <string>
#include <vector>

#include "report/json_report.h"

// Creates DIR (mode 0700) if missing. Prints why and returns false when it cannot.
bool ensure_output_dir(const std::string& dir);

// Writes a file readable by the user only (0600), never following a symlink.
bool write_private_file(const std::string& path, const std::string& content);

// Reads the traces and writes OUT_DIR/report.json; prints the summary on stderr.
// The report's JSON is handed back through `report_out` when it is not null. While reading, a
// progress bar on stderr when it is a terminal (cli/progress.h); `no_progress`: never.
int write_reports(const std::vector<std::string>& traces, const std::string& out_dir,
                  const vramtrace::report::RunInfo& info, nlohmann::json* report_out,
                  bool no_progress = false);

// Trace files named directly or found in directories (*.vtrace). Sets *ok=false on a missing one.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool* ok);

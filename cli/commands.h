// What the vramtrace subcommands share: how each is registered and run, where its files go
// (private, atomic, never over an earlier output without --force), and the reports themselves.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "report/json_report.h"

namespace CLI {
class App;
}

namespace vramtrace::cli {

// Exit codes of vramtrace itself (the gate's own are in report/check.h): bad usage or
// unrecoverable input, and a report that could not be written (full disk, read-only folder:
// sysexits' EX_IOERR).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitWriteFailed = 74;

// Written by `run` into its folder: which run the traces there belong to (`report` refuses to
// merge traces of different runs unless --merge).
inline constexpr const char* kRunMarker = "vramtrace.run";
// Where outputs go without -o: a new numbered folder in it each time.
inline constexpr const char* kDefaultOutputRoot = "vramtrace-out";

inline constexpr const char* kProgressHelp =
    "No progress bar while reading traces (drawn on a terminal only, for traces of 64 MiB or "
    "more; VRAMTRACE_PROGRESS=auto|on|off)";

// A subcommand: registered on the app with its options; `run` is called when it was the one
// parsed. `words_for_cli11`, when set, says how many of argv CLI11 may parse (the rest belongs
// to a command vramtrace runs).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
  std::function<int(int argc, char** argv)> words_for_cli11;
};

Command add_run_command(CLI::App& app);       // cli/run.cpp
Command add_plan_command(CLI::App& app);      // cli/run.cpp
Command add_check_command(CLI::App& app);     // cli/check.cpp
Command add_diff_command(CLI::App& app);      // cli/diff.cpp
Command add_report_command(CLI::App& app);    // cli/report.cpp
Command add_whatif_command(CLI::App& app);    // cli/whatif.cpp
Command add_snapshot_command(CLI::App& app);  // cli/snapshot.cpp
Command add_export_command(CLI::App& app);    // cli/export.cpp

// A command's exit code once what it wrote to stdout is flushed: a stream that failed (a full
// disk, a closed pipe's descriptor) is said, and turns a success into kExitWriteFailed.
int stdout_checked(int rc);

// Creates DIR (mode 0700) if missing. Prints why and returns false when it cannot.
bool ensure_output_dir(const std::string& dir);

// How an output path is written, the one rule of every file vramtrace writes: `replace` a
// regular file or a new name (atomically, below); `write_through` a character device or a FIFO
// (/dev/null, /dev/stdout, a pipe: the bytes go into it, as a shell's `>` sends them; nothing is
// replaced); `refuse` anything else: a folder, a block device, a socket, and a symbolic link
// that does not lead to a device or FIFO (a link is never swapped for a file, nor its target
// rewritten). `why` (for refuse) starts with a space: " is a folder: name a file".
enum class OutputKind { replace, write_through, refuse };
OutputKind output_kind(const std::string& path, std::string* why);

// Writes PATH as output_kind() says. Replaced: a file readable by the user only (0600), written
// into a temporary file in the same directory and renamed over PATH once whole. On a failure
// (full disk, read-only directory, a path refused) PATH is left as it was and the reason is
// printed.
bool write_private_file(const std::string& path, const std::string& content);

// The two halves of write_private_file, for files that must appear together: the temporary
// file written ("" on a failure, printed), then renamed to PATH (false on a failure, printed;
// the temporary file is removed; a PATH that is there and not a regular file is never replaced).
std::string stage_private_file(const std::string& path, const std::string& content);
bool commit_private_file(const std::string& tmp, const std::string& path);

// The files an input of `check`, `diff` or `run --baseline` stands for (report::load_report):
// a file itself; a folder's report.json and its traces.
std::vector<std::string> input_files(const std::string& path);

// Whether the file that OPTION names (--markdown, --junit, --html) may be written: never when it
// is one of `inputs`' files (input_files), even with --force; a folder never; an existing file
// only with `force`. When it may not, says why and what to do in one line (prefixed with `who`;
// nothing said when `who` is null).
bool output_file_allowed(const std::string& path, const char* option, bool force,
                         const std::vector<std::string>& inputs, const char* who);

// Whether two paths name the same file (also through a link, or spelled differently); a path
// that does not exist yet is compared by its absolute, normalised form.
bool same_file(const std::string& a, const std::string& b);

// A new folder kDefaultOutputRoot/PREFIX-N (N one more than the highest there), made private;
// "" when it cannot be made (the reason printed).
std::string new_numbered_dir(const std::string& prefix);

// Makes DIR ready for new output. A folder that holds an earlier output is refused unless
// `force`, and even then when any file in the way was not written there by vramtrace (named in
// DIR's run marker, or a trace of the marker's run: a user's report.json, a trace of another
// run, a link are refused, said, and left as they are). With it, and `clear_traces` (run, which
// writes its traces there), the earlier traces and run marker are removed, since `report DIR`
// would merge them with the new ones. Files that are not vramtrace's are never touched.
bool prepare_output_dir(const std::string& dir, bool force, bool clear_traces, const char* who);
// Adds NAMES (files in DIR that vramtrace has just written) to DIR's run marker's "files", the
// list of what a later --force may replace; a marker is made when there is none.
void record_written(const std::string& dir, const std::vector<std::string>& names);

// The run that the traces of a folder belong to: its run marker's id ("" without one).
std::string run_id_of_dir(const std::string& dir);
// A new run id: 128 random bits in hex.
std::string new_run_id();

// What a trace's first record says of it: the process it recorded (host, pid, start times) and
// the run that process belonged to (VRAMTRACE_RUN_ID, "" in traces of older versions); nothing
// when the trace does not start with its process.
struct TraceIdentity {
  std::string process;
  std::string run_id;
};
std::optional<TraceIdentity> trace_identity(const std::string& path);
// The run of a trace of an older version, which names none: its folder's run marker ("" without).
std::string run_of_folder(const std::string& trace);
// Traces by run, of more than one run: says so, naming each run (by its folder when it has one
// of its own, else by its first trace), and ends with `what_to_do`.
void refuse_runs(const char* who, const std::map<std::string, std::vector<std::string>>& runs,
                 const char* what_to_do);
// Traces (.vtrace; side channels are skipped) by the run they belong to: the run id of their
// first record, else their folder's run marker's; a trace cut before its process record is in
// none (it is damaged, not a run of its own).
std::map<std::string, std::vector<std::string>> runs_of(const std::vector<std::string>& traces);
// For `check` and `diff`, which read a folder of traces (without report.json) as one run: false,
// said, when its traces are of different runs.
bool input_is_one_run(const std::string& path, const char* who);

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

}  // namespace vramtrace::cli

// The inputs of `check`, `diff` and `run --baseline` (see check_load.h): a report.json, a run
// directory or a trace, read into a report that the comparison (collector/analysis/compare.h)
// can trust.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/check_load.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "collector/model/model.h"
#include "report/check.h"
#include "report/json_report.h"
#include "report/report_keys.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace vramtrace::cli {

using report::CheckError;
using report::printable;
namespace field = collector::field;

namespace {

// A report of traces, read as `vramtrace report` reads them (the same files of a folder, the
// same refusals): a trace that cannot be opened, or traces of which nothing could be read, are
// bad input, never a report of a run that used no memory.
json report_from_traces(const std::vector<std::string>& paths, const std::string& what) {
  collector::RunInputs in = collector::run_inputs(paths);
  if (!in.errors.empty())
    throw CheckError(what + ": " +
                     (fs::is_directory(paths.front())
                          ? std::string("a directory with neither report.json nor traces")
                          : printable(in.errors.front())));
  collector::RunFiles files = collector::open_run(in.files);
  if (!files.problems.empty()) throw CheckError(what + ": " + printable(files.problems.front()));
  collector::Run run = collector::model_of(std::move(files));
  if (!run.anything_read())
    throw CheckError(what + ": nothing could be read from its traces" +
                     (run.problems.empty() ? "" : " (" + printable(run.problems.front()) + ")"));
  return report::to_json(collector::analysis_of(run));
}

// A JSON file, parsed; throws CheckError saying where it stops being JSON (the parser's own
// message names its internals: "[json.exception.parse_error.101] ...").
json parse_json_file(const std::string& file, const std::string& what) {
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw CheckError(what + ": cannot be read");
  if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
    throw CheckError(what + ": not a vramtrace report (an empty file)");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const size_t line = 1 + std::count(text.begin(), text.begin() + at, '\n');
    const size_t newline = at ? text.rfind('\n', at - 1) : std::string::npos;
    const size_t column = at - (newline == std::string::npos ? 0 : newline + 1) + 1;
    throw CheckError(what + ": not a vramtrace report (not JSON: " +
                     (at >= text.size() ? std::string("it ends too early, at line ")
                                        : std::string("a syntax error at line ")) +
                     std::to_string(line) + ", column " + std::to_string(column) + ")");
  }
}

}  // namespace

collector::ReportRead load_report(const std::string& path, const std::string& role) {
  std::error_code ec;
  const std::string what = role + " " + printable(path);
  if (!fs::exists(path, ec)) throw CheckError(what + ": no such file or directory");
  json r;
  try {
    if (fs::is_directory(path, ec)) {
      if (fs::exists(fs::path(path) / "report.json", ec))
        r = parse_json_file((fs::path(path) / "report.json").string(), what + "/report.json");
      else
        r = report_from_traces({path}, what);
    } else if (collector::starts_as_trace(path) || collector::is_snapshot(path)) {
      r = report_from_traces({path}, what);
    } else {
      r = parse_json_file(path, what);
    }
  } catch (const json::exception&) {
    throw CheckError(what + ": not a vramtrace report");
  } catch (const collector::TraceError& e) {
    throw CheckError(what + ": " + printable(e.what()));
  }
  if (!r.is_object() || !r.contains(field::schema))
    throw CheckError(what + ": not a vramtrace report (no \"schema\" key)");
  if (r[field::schema] != report::kSchema)
    throw CheckError(
        what + ": report schema " +
        printable(r[field::schema].dump(-1, ' ', false, json::error_handler_t::replace)) +
        ", this vramtrace reads \"" + report::kSchema + "\"");
  std::string problem = collector::malformed_report(r);
  if (!problem.empty()) throw CheckError(what + ": malformed report (" + problem + ")");
  return r;
}

}  // namespace vramtrace::cli

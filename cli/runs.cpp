// Which run each trace belongs to, so that traces of different runs are not reported (or
// checked) as one: the run id a trace names (VRAMTRACE_RUN_ID, recorded with its process), else
// the run marker of its folder.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>

#include "cli/commands.h"
#include "collector/ingest/run_files.h"
#include "collector/ingest/trace_reader.h"
#include "common/env_names.h"
#include "report/check.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

std::optional<TraceIdentity> trace_identity(const std::string& path) {
  try {
    collector::TraceReader r(path);
    collector::Record e;
    if (!r.next(e) || e.type != format::RecordType::Process) return std::nullopt;
    TraceIdentity id;
    id.process = std::string(e.process.host) + "/" + std::to_string(e.process.pid) + "/" +
                 std::to_string(e.process.realtime_ns) + "/" + std::to_string(e.process.start_ns);
    const std::string key = std::string(env::kRunId) + "=";
    const std::string vars(e.process.rank_env);
    for (size_t start = 0; start < vars.size();) {
      size_t end = vars.find('\n', start);
      if (end == std::string::npos) end = vars.size();
      if (vars.compare(start, key.size(), key) == 0)
        id.run_id = vars.substr(start + key.size(), end - start - key.size());
      start = end + 1;
    }
    return id;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string run_of_folder(const std::string& trace) {
  std::string dir = fs::path(trace).parent_path().string();
  return run_id_of_dir(dir.empty() ? "." : dir);
}

void refuse_runs(const char* who, const std::map<std::string, std::vector<std::string>>& runs,
                 const char* what_to_do) {
  std::cerr << who << ": these traces come from " << runs.size() << " different runs:";
  std::map<std::string, std::set<std::string>> runs_in_folder;
  for (const auto& [id, list] : runs)
    for (const auto& t : list) runs_in_folder[fs::path(t).parent_path().string()].insert(id);
  for (const auto& [id, list] : runs) {
    const std::string folder = fs::path(list.front()).parent_path().string();
    bool own_folder = runs_in_folder[folder].size() == 1;
    for (const auto& t : list) own_folder = own_folder && fs::path(t).parent_path() == folder;
    if (own_folder)
      std::cerr << " " << report::printable(folder.empty() ? "." : folder)
                << (list.size() > 1 ? " (" + std::to_string(list.size()) + " traces)" : "");
    else
      std::cerr << " " << report::printable(list.front())
                << (list.size() > 1 ? " and " + std::to_string(list.size() - 1) + " more" : "");
    std::cerr << (id.empty() ? " (no run id: traces of an older vramtrace)" : "") << ";";
  }
  std::cerr << " " << what_to_do << "\n";
}

std::map<std::string, std::vector<std::string>> runs_of(const std::vector<std::string>& traces) {
  std::map<std::string, std::vector<std::string>> runs;
  for (const auto& t : traces) {
    if (collector::is_side_channel(t)) continue;  // read with its process's trace, whose run counts
    if (collector::is_snapshot(t)) {              // a PyTorch memory snapshot: a run of its own
      runs["snapshot " + t].push_back(t);
      continue;
    }
    auto id = trace_identity(t);
    std::string run = id && !id->run_id.empty() ? id->run_id : run_of_folder(t);
    if (!id && run.empty()) continue;  // cut before its process record: damaged, not a run
    runs[run].push_back(t);
  }
  return runs;
}

bool input_is_one_run(const std::string& path, const char* who) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "report.json", ec)) return true;
  const auto runs = runs_of(collector::run_inputs({path}).files);
  if (runs.size() <= 1) return true;
  refuse_runs(who, runs,
              "report them with `vramtrace report --merge`, and give the report instead");
  return false;
}

}  // namespace vramtrace::cli

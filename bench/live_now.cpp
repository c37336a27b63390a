// How long the report of a moment of a running run takes (cli/live_report.h, what --serve and
// snapshots make). The run folder's traces are made to grow as a running job's do: each is
// copied up to the frame boundary before its last NEW_PERCENT of frames, and the report of
// that moment made (the first one: every trace read); then the rest is appended, and the
// report of the next moment made (what arrived since is read, the model kept is copied and
// finished). For the second moment, where its time goes: the model (collector/model/live_model.h's
// moment()), the analysis of its Run (analysis_of), report.json's object (to_json); then what
// the server makes of it for the page (page_data, dumped: /page.json) and for /report.json
// (dumped), and a third now() with nothing new (the cached report). Each figure is the median
// of REPEATS runs.
//   vt_live_bench RUN_DIR [REPEATS=3] [NEW_PERCENT=1]
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/live_report.h"
#include "collector/analysis/analysis.h"
#include "collector/ingest/frames.h"
#include "collector/ingest/run_files.h"
#include "collector/model/live_model.h"
#include "common/format.h"
#include "report/html_report.h"
#include "report/json_report.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The byte offset of the frame boundary before the last `percent` % of a trace's frames.
size_t cut_at(const std::string& bytes, double percent) {
  std::vector<size_t> ends;
  vramtrace::collector::walk_frames(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
      [&ends](const vramtrace::collector::FrameAt& f, const uint8_t*) {
        ends.push_back(f.end());
        return true;
      });
  const size_t keep = static_cast<size_t>(ends.size() * (100.0 - percent) / 100.0);
  return keep == 0 ? ends.front() : ends[keep - 1];
}

struct Grown {
  std::vector<std::string> paths, first, rest;
  void write_first(const std::string& dir, std::vector<std::string>& running) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string to = dir + "/" + fs::path(paths[i]).filename().string();
      std::ofstream(to, std::ios::binary) << first[i];
      if (vramtrace::collector::is_run_file(to)) running.push_back(to);
    }
  }
  void append_rest(const std::string& dir) {
    for (size_t i = 0; i < paths.size(); ++i)
      std::ofstream(dir + "/" + fs::path(paths[i]).filename().string(),
                    std::ios::binary | std::ios::app)
          << rest[i];
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vt_live_bench RUN_DIR [REPEATS] [NEW_PERCENT]\n");
    return 2;
  }
  const std::string dir = fs::absolute(argv[1]).lexically_normal().string();
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const double percent = argc > 3 ? std::atof(argv[3]) : 1.0;
  const std::string work = dir + ".live";
  Grown grown;
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string all = read_all(e.path());
    const bool trace = vramtrace::collector::is_run_file(e.path()) &&
                       !vramtrace::collector::is_side_channel(e.path());
    const size_t cut = trace ? cut_at(all, percent) : all.size();
    grown.paths.push_back(e.path());
    grown.first.push_back(all.substr(0, cut));
    grown.rest.push_back(all.substr(cut));
    bytes += all.size();
  }
  std::vector<double> first_s, now_s, model_s, analysis_s, json_s, page_s, dump_s, cached_s;
  uint64_t events = 0, fresh = 0, copied = 0, page_bytes = 0;
  bool started_over = false;
  for (int i = 0; i < repeats; ++i) {
    vramtrace::report::RunInfo state;
    state.command = {"synthetic"};
    grown.write_first(work, state.still_running);
    {
      vramtrace::cli::LiveReport live(work, [&] { return state; });
      const auto t0 = Clock::now();
      live.now();
      const auto t1 = Clock::now();
      grown.append_rest(work);
      const auto t2 = Clock::now();
      auto j = live.now();
      const auto t3 = Clock::now();
      const std::string page = vramtrace::report::page_data(*j).dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
      const auto t4 = Clock::now();
      const std::string full = j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      const auto t5 = Clock::now();
      auto again = live.now();
      const auto t6 = Clock::now();
      if (again != j) std::fprintf(stderr, "vt_live_bench: the third now() made a new report\n");
      first_s.push_back(secs(t0, t1));
      now_s.push_back(secs(t2, t3));
      page_s.push_back(secs(t3, t4));
      dump_s.push_back(secs(t4, t5));
      cached_s.push_back(secs(t5, t6));
      events = (*j)["run"]["events"].get<uint64_t>();
      page_bytes = page.size();
    }
    // The same two moments through the model alone, and the analysis and report.json of the
    // second: where a moment's time goes.
    state.still_running.clear();
    grown.write_first(work, state.still_running);
    std::vector<vramtrace::collector::LiveTrace> traces;
    for (const auto& path : state.still_running)
      traces.push_back({path, vramtrace::collector::whole_frames_end(path), true});
    vramtrace::collector::LiveModel model;
    model.moment(traces, {});
    grown.append_rest(work);
    for (auto& t : traces) t.end = vramtrace::collector::whole_frames_end(t.path);
    const auto t0 = Clock::now();
    const vramtrace::collector::Run run = model.moment(traces, {});
    const auto t1 = Clock::now();
    const auto analysis = vramtrace::collector::analysis_of(run, state.still_running);
    const auto t2 = Clock::now();
    const auto j = vramtrace::report::to_json(analysis, state);
    const auto t3 = Clock::now();
    model_s.push_back(secs(t0, t1));
    analysis_s.push_back(secs(t1, t2));
    json_s.push_back(secs(t2, t3));
    fresh = model.last_cost().applied;
    copied = model.last_cost().applied_to_copy;
    started_over = model.last_cost().started_over;
  }
  fs::remove_all(work);
  std::printf(
      "events=%llu trace_MB=%.1f first_now_s=%.3f | a moment with %.1f%% new (%llu events read, "
      "%llu applied to the copy%s): now_s=%.4f = model_s=%.4f + analysis_s=%.4f + to_json_s=%.4f "
      "+ rest | page_json_s=%.3f report_json_s=%.3f cached_now_s=%.6f page_KB=%.0f\n",
      static_cast<unsigned long long>(events), bytes / 1e6, median(first_s), percent,
      static_cast<unsigned long long>(fresh), static_cast<unsigned long long>(copied),
      started_over ? ", started over" : "", median(now_s), median(model_s), median(analysis_s),
      median(json_s), median(page_s), median(dump_s), median(cached_s), page_bytes / 1024.0);
  return 0;
}

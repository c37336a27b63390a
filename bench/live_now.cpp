// How long the report of a moment of a running run takes (cli/live_report.h, what --serve and
// snapshots make): LiveReport::now() on a run folder's traces as if the run were still going
// (each trace still being written), then what the server makes of it for the page (page_data,
// dumped: /page.json) and for /report.json (dumped), and a second now() with nothing new (the
// cached report). Each figure is the median of REPEATS fresh LiveReports.
//   vt_live_bench RUN_DIR [REPEATS=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/live_report.h"
#include "report/html_report.h"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vt_live_bench RUN_DIR [REPEATS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  vramtrace::report::RunInfo state;
  state.command = {"synthetic"};
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (vramtrace::cli::is_trace_file(e.path())) {
      state.still_running.push_back(dir + "/" + e.path().filename().string());
      bytes += fs::file_size(e.path());
    }
  std::vector<double> now_s, page_s, json_s, cached_s;
  uint64_t events = 0, page_bytes = 0;
  for (int i = 0; i < repeats; ++i) {
    vramtrace::cli::LiveReport live(dir, [&] { return state; });
    const auto t0 = Clock::now();
    auto j = live.now();
    const auto t1 = Clock::now();
    const std::string page = vramtrace::report::page_data(*j).dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    const auto t2 = Clock::now();
    const std::string full = j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    const auto t3 = Clock::now();
    auto again = live.now();
    const auto t4 = Clock::now();
    if (again != j) std::fprintf(stderr, "vt_live_bench: the second now() made a new report\n");
    now_s.push_back(secs(t0, t1));
    page_s.push_back(secs(t1, t2));
    json_s.push_back(secs(t2, t3));
    cached_s.push_back(secs(t3, t4));
    events = (*j)["run"]["events"].get<uint64_t>();
    page_bytes = page.size();
  }
  std::printf(
      "events=%llu trace_MB=%.1f now_s=%.3f page_json_s=%.3f report_json_s=%.3f "
      "cached_now_s=%.6f page_KB=%.0f\n",
      static_cast<unsigned long long>(events), bytes / 1e6, median(now_s), median(page_s),
      median(json_s), median(cached_s), page_bytes / 1024.0);
  return 0;
}

// The report of a moment of a running run (cli/live_report.h).
#include "cli/live_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "cli/commands.h"
#include "collector/model.h"
#include "collector/stacks.h"
#include "collector/trace_reader.h"
#include "common/format.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

using nlohmann::json;

uint64_t whole_frames_end(const std::string& path, uint64_t from) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t at = from;
  if (at == 0) {
    format::FileHeader h{};
    if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
      close(fd);
      return 0;
    }
    // Not a trace of this version: the reader refuses it, with its reason.
    if (h.header_bytes < sizeof h || h.header_bytes > 4096) {
      close(fd);
      return size;
    }
    at = h.header_bytes;
  }
  uint64_t end = at;
  for (;;) {
    format::FrameHeader h{};
    if (pread(fd, &h, sizeof h, static_cast<off_t>(end)) != static_cast<ssize_t>(sizeof h)) break;
    if (h.stored_bytes > format::kMaxFrameBytes) {
      end = size;  // not a frame header: the reader says where the trace is damaged
      break;
    }
    const uint64_t next = end + sizeof h + h.stored_bytes;
    if (next > size) break;  // still arriving
    end = next;
  }
  close(fd);
  return from == 0 && end == at ? 0 : end;
}

namespace {

// What is live now on each device, by site and by library, every process's (the page's "now").
json live_now(const collector::Run& run) {
  struct Device {
    uint64_t bytes = 0, count = 0;
    json sites = json::array(), libraries = json::array();
    size_t processes = 0;
  };
  std::map<std::pair<std::string, uint32_t>, Device> devices;
  collector::Symbolizer symbols;
  for (const auto& p : run.processes) {
    std::map<uint32_t, std::vector<collector::Allocation>> by_device;
    for (const auto& [key, a] : p.live)
      if (a.space == 0) by_device[a.device].push_back(a);
    if (by_device.empty()) continue;
    collector::StackResolver stacks(p, symbols);
    for (auto& [index, allocs] : by_device) {
      Device& d = devices[{p.host, index}];
      ++d.processes;
      for (const auto& a : allocs) d.bytes += a.bytes;
      d.count += allocs.size();
      for (json& s : report::sites_json(allocs, stacks)) {
        s["pid"] = p.pid;
        d.sites.push_back(std::move(s));
      }
      for (json& l : report::libraries_json(allocs, stacks)) d.libraries.push_back(std::move(l));
    }
  }
  json out = json::array();
  for (auto& [key, d] : devices) {
    auto largest = [](const json& a, const json& b) {
      return a["bytes"].get<uint64_t>() > b["bytes"].get<uint64_t>();
    };
    std::stable_sort(d.sites.begin(), d.sites.end(), largest);
    // A library held by several processes: one row.
    std::map<std::string, json> libs;
    for (json& l : d.libraries) {
      json& into = libs[l["library"].get<std::string>()];
      if (into.is_null()) {
        into = std::move(l);
        continue;
      }
      into["bytes"] = into["bytes"].get<uint64_t>() + l["bytes"].get<uint64_t>();
      into["count"] = into["count"].get<uint64_t>() + l["count"].get<uint64_t>();
    }
    json libraries = json::array();
    for (auto& [name, l] : libs) libraries.push_back(std::move(l));
    std::stable_sort(libraries.begin(), libraries.end(), largest);
    out.push_back({{"host", key.first},
                   {"device", key.second},
                   {"bytes", d.bytes},
                   {"count", d.count},
                   {"by_site", std::move(d.sites)},
                   {"by_library", std::move(libraries)}});
  }
  return out;
}

}  // namespace

LiveReport::LiveReport(std::string run_dir, State state)
    : run_dir_(std::move(run_dir)), state_(std::move(state)) {}

LiveReport::~LiveReport() = default;

std::string LiveReport::signature(const report::RunInfo& info) {
  std::string s;
  for (const auto& [path, t] : traces_)
    s += path + '\t' + std::to_string(t.size) + '\t' + std::to_string(t.mtime_ns) + '\n';
  for (const auto& p : info.still_running) s += "open\t" + p + '\n';
  if (info.exit_code) s += "exit\t" + std::to_string(*info.exit_code) + '\n';
  if (info.signal) s += "signal\t" + std::to_string(*info.signal) + '\n';
  return s;
}

std::shared_ptr<const json> LiveReport::now() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || (held_ && last_)) return last_;
  const report::RunInfo info = state_();

  // The traces so far (the collector names them run_dir + "/vramtrace.<pid>.vtrace": the same
  // spelling here, so that RunInfo::still_running finds them).
  std::map<std::string, TraceState> seen;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir_, ec)) {
    if (!is_trace_file(entry.path())) continue;
    const std::string path = run_dir_ + "/" + entry.path().filename().string();
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    TraceState t;
    auto old = traces_.find(path);
    if (old != traces_.end()) t = old->second;
    t.size = static_cast<uint64_t>(st.st_size);
    t.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    seen[path] = t;
  }
  traces_ = std::move(seen);
  const std::string sig = signature(info);
  if (last_ && sig == last_signature_) return last_;

  std::vector<std::unique_ptr<collector::TraceReader>> readers;
  std::vector<std::string> torch;
  std::vector<std::string> unreadable;
  for (auto& [path, t] : traces_) {
    if (is_torch_trace(path)) {
      torch.push_back(path);
      continue;
    }
    // A frame boundary found before is one still (the file only grows while it is written).
    t.whole = whole_frames_end(path, t.whole <= t.size ? t.whole : 0);
    // Connected, but its first frame has not come whole yet: it appears at the next moment.
    if (t.whole == 0) continue;
    try {
      readers.push_back(std::make_unique<collector::TraceReader>(path, t.whole));
    } catch (const collector::TraceError& e) {
      unreadable.push_back(e.what());
    }
  }
  collector::Run run = collector::analyze(std::move(readers), torch);
  for (auto& u : unreadable) run.problems.push_back(u);
  // A process still running has not died of its OOMs (the model takes a process without its
  // exit for one that died): which one ends it, if any, is known only when it ends.
  for (auto& p : run.processes)
    if (std::find(info.still_running.begin(), info.still_running.end(), p.trace_path) !=
        info.still_running.end())
      for (auto& o : p.ooms) o.fatal = false;
  auto j = std::make_shared<json>(report::to_json(run, info));
  (*j)["live"] = {{"running", true}, {"now", live_now(run)}};
  last_ = std::move(j);
  last_signature_ = sig;
  return last_;
}

void LiveReport::hold() {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ = true;
}

void LiveReport::finish(const json& final_report) {
  auto j = std::make_shared<json>(final_report);
  (*j)["live"] = {{"running", false}};
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = std::move(j);
  finished_ = true;
}

}  // namespace vramtrace::cli

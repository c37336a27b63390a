// A run's files by name, and opened (run_files.h).
#include "collector/ingest/run_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "collector/ingest/frames.h"
#include "collector/ingest/torch_snapshot.h"
#include "common/format.h"

namespace vramtrace::collector {

namespace {

std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

bool named(const std::string& path, const char* extension) {
  const std::filesystem::path name(file_name(path));
  return name.string().rfind("vramtrace.", 0) == 0 && name.extension() == extension;
}

}  // namespace

bool is_side_channel(const std::string& path) {
  return named(path, ".torch") || named(path, ".jax");
}

bool is_snapshot(const std::string& path) {
  // A trace or side channel is never one, whatever its bytes.
  return !named(path, ".vtrace") && !is_side_channel(path) && starts_as_pickle(path);
}

bool is_run_file(const std::string& path) {
  return named(path, ".vtrace") || is_side_channel(path);
}

bool starts_as_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::memcmp(magic, format::kMagic, 8) == 0;
}

uint64_t pid_in_trace_name(const std::string& path) {
  const std::string name = file_name(path);
  const std::string prefix = "vramtrace.";
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  uint64_t pid = 0;
  size_t i = prefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < prefix.size() + 10; ++i)
    pid = pid * 10 + static_cast<uint64_t>(name[i] - '0');
  if (i == prefix.size() || (name.compare(i, 7, ".vtrace") != 0 && name[i] != '-')) return 0;
  return pid;
}

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
  auto read_header = [fd](uint64_t offset, format::FrameHeader* h) {
    return pread(fd, h, sizeof *h, static_cast<off_t>(offset)) == static_cast<ssize_t>(sizeof *h);
  };
  const FramesEnd frames = walk_frames(at, size, read_header, [](const FrameAt&) { return true; });
  // Not a frame header: the reader says where the trace is damaged.
  const uint64_t end = frames.damaged ? size : frames.end;
  close(fd);
  return from == 0 && end == at ? 0 : end;
}

RunInputs run_inputs(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  RunInputs in;
  std::set<std::pair<dev_t, ino_t>> seen;
  auto add = [&](const std::string& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) {
      in.notes.push_back(path + ": the same trace as one given before: counted once");
      return;
    }
    in.files.push_back(path);
  };
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path, ec))
        if (entry.path().extension() == ".vtrace" || is_side_channel(entry.path()))
          found.push_back(entry.path().string());
      std::sort(found.begin(), found.end());
      const bool any_trace = std::any_of(found.begin(), found.end(),
                                         [](const std::string& f) { return !is_side_channel(f); });
      if (!any_trace) in.errors.push_back(path + ": no .vtrace files in this directory");
      for (const auto& f : found) add(f);
    } else if (fs::exists(path, ec)) {
      add(path);
    } else {
      in.errors.push_back(path + ": no such file or directory");
    }
  }
  return in;
}

RunFiles open_run(const std::vector<std::string>& paths) {
  RunFiles files;
  // The processes that stand for snapshots: pids of their own, never a traced process's (the
  // kernel's pids stay below 2^22).
  uint64_t snapshot_pid = 1ull << 30;
  for (const auto& path : paths) {
    if (is_side_channel(path)) {
      files.side_channels.push_back(path);
      continue;
    }
    if (is_snapshot(path)) {
      try {
        TorchSnapshot s = read_torch_snapshot(path, snapshot_pid++);
        files.trace_bytes += s.process_trace.size();  // what its reader will read
        files.traces.push_back(TraceReader::from_bytes(std::move(s.process_trace), path));
        s.torch.context.from_snapshot = true;
        files.snapshots.push_back(std::move(s.torch));
        for (auto& n : s.problems) files.notes.push_back(std::move(n));
      } catch (const TraceError& e) {
        files.problems.push_back(e.what());
      }
      continue;
    }
    try {
      files.traces.push_back(std::make_unique<TraceReader>(path));
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(path, ec);
      if (!ec) files.trace_bytes += size;
    } catch (const TraceError& e) {
      files.problems.push_back(e.what());
    }
  }
  return files;
}

}  // namespace vramtrace::collector

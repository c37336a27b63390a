// The files and folders vramtrace writes: private (0700/0600), written atomically, never over an
// earlier output without --force; and the trace files a command line names.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "collector/ingest/run_files.h"
#include "report/check.h"

namespace fs = std::filesystem;

namespace vramtrace::cli {

namespace {

// What an earlier run or report left in a folder: its reports, its traces, its run marker.
std::vector<fs::path> earlier_output(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "report.json" || name == "report.html" || name == kRunMarker ||
        collector::is_run_file(entry.path()))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string new_numbered_dir(const std::string& prefix) {
  std::error_code ec;
  if (!fs::exists(kDefaultOutputRoot, ec)) {
    if (mkdir(kDefaultOutputRoot, 0700) != 0 && errno != EEXIST) {
      std::cerr << "vramtrace: cannot create " << kDefaultOutputRoot << ": " << std::strerror(errno)
                << "\n";
      return {};
    }
  }
  unsigned long highest = 0;
  const std::string stem = prefix + "-";
  for (const auto& entry : fs::directory_iterator(kDefaultOutputRoot, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.size() == stem.size() || name.size() > stem.size() + 9)
      continue;
    const std::string digits = name.substr(stem.size());
    if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      highest = std::max(highest, std::stoul(digits));
  }
  // Two runs started at once both try N: the one that loses takes N+1.
  for (unsigned long n = highest + 1; n < highest + 1000; ++n) {
    std::string dir = std::string(kDefaultOutputRoot) + "/" + stem + std::to_string(n);
    if (mkdir(dir.c_str(), 0700) == 0) return dir;
    if (errno != EEXIST) {
      std::cerr << "vramtrace: cannot create " << dir << ": " << std::strerror(errno) << "\n";
      return {};
    }
  }
  std::cerr << "vramtrace: cannot create a new folder in " << kDefaultOutputRoot << "\n";
  return {};
}

namespace {

// A folder's run marker, when it is one (a JSON object); null otherwise.
nlohmann::json marker_of(const std::string& dir) {
  std::ifstream in(dir + "/" + kRunMarker);
  if (!in) return nullptr;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const nlohmann::json::exception&) {}
  return nullptr;
}

// Whether a file in DIR was written there by vramtrace: a regular file that DIR's run marker
// lists, a trace whose first record names the marker's run, or the side channel (.torch, .jax)
// of such a trace's process; the marker itself when it is one. Anything else, whatever its
// name, is the user's.
bool written_by_vramtrace(const fs::path& path, const nlohmann::json& marker) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !marker.is_object()) return false;
  const std::string name = path.filename().string();
  if (name == kRunMarker) return marker.contains("run_id") || marker.contains("files");
  if (marker.contains("files") && marker["files"].is_array())
    for (const auto& f : marker["files"])
      if (f.is_string() && f.get<std::string>() == name) return true;
  const std::string run = marker.value("run_id", std::string());
  if (run.empty()) return false;
  fs::path trace = path;
  if (collector::is_side_channel(path)) trace.replace_extension(".vtrace");
  if (trace.extension() != ".vtrace") return false;
  if (trace != path && (lstat(trace.c_str(), &st) != 0 || !S_ISREG(st.st_mode))) return false;
  auto id = trace_identity(trace.string());
  return id && id->run_id == run;
}

std::string some_names(const std::vector<fs::path>& paths) {
  std::string names;
  for (size_t i = 0; i < paths.size() && i < 3; ++i)
    names += (i ? ", " : "") + report::printable(paths[i].filename().string());
  if (paths.size() > 3) names += " and " + std::to_string(paths.size() - 3) + " more";
  return names;
}

}  // namespace

bool prepare_output_dir(const std::string& dir, bool force, bool clear_traces, const char* who) {
  if (!ensure_output_dir(dir)) return false;
  std::vector<fs::path> old = earlier_output(dir);
  // `report` writes reports only: traces there (often its own input) are not in its way.
  if (!clear_traces)
    old.erase(std::remove_if(old.begin(), old.end(),
                             [](const fs::path& p) {
                               return p.filename() != "report.json" &&
                                      p.filename() != "report.html";
                             }),
              old.end());
  if (old.empty()) return true;
  if (!force) {
    std::cerr << who << ": " << report::printable(dir) << " holds an earlier output ("
              << some_names(old) << "): use --force to replace it, or another -o\n";
    return false;
  }
  // --force replaces what an earlier vramtrace wrote there, and nothing else: a user's own
  // report.json, or a trace of another run, is refused before anything is touched.
  const nlohmann::json marker = marker_of(dir);
  std::vector<fs::path> theirs;
  for (const auto& path : old)
    if (!written_by_vramtrace(path, marker)) theirs.push_back(path);
  if (!theirs.empty()) {
    std::cerr << who << ": " << report::printable(dir) << " holds " << some_names(theirs)
              << ", which vramtrace did not write there (its " << kRunMarker
              << " does not name them): --force replaces only an earlier vramtrace output; move "
                 "them away, or choose another -o\n";
    return false;
  }
  if (clear_traces) {
    std::error_code ec;
    for (const auto& path : old)
      if (collector::is_run_file(path) || path.filename() == kRunMarker) fs::remove(path, ec);
  }
  return true;
}

void record_written(const std::string& dir, const std::vector<std::string>& names) {
  const std::string path = dir + "/" + kRunMarker;
  nlohmann::json marker = marker_of(dir);
  std::error_code ec;
  if (marker.is_null()) {
    if (fs::symlink_status(path, ec).type() != fs::file_type::not_found) return;  // not ours
    marker = nlohmann::json::object();
  }
  std::set<std::string> files;
  if (marker.contains("files") && marker["files"].is_array())
    for (const auto& f : marker["files"])
      if (f.is_string()) files.insert(f.get<std::string>());
  const size_t before = files.size();
  for (const auto& n : names) files.insert(n);
  if (files.size() == before && marker.contains("files")) return;
  marker["files"] = files;
  write_private_file(path,
                     marker.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::string run_id_of_dir(const std::string& dir) {
  std::ifstream in(dir + "/" + kRunMarker);
  if (!in) return {};
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.contains("run_id") && j["run_id"].is_string()) return j["run_id"].get<std::string>();
  } catch (const nlohmann::json::exception&) {}
  return "(unreadable " + std::string(kRunMarker) + ")";
}

std::string new_run_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

bool ensure_output_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      std::cerr << "vramtrace: cannot create " << report::printable(dir) << ": " << ec.message()
                << "\n";
      return false;
    }
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  } else if (!fs::is_directory(dir, ec)) {
    std::cerr << "vramtrace: " << report::printable(dir) << " exists and is not a directory\n";
    return false;
  }
  return true;
}

OutputKind output_kind(const std::string& path, std::string* why) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return OutputKind::replace;  // a new file
  if (S_ISREG(st.st_mode)) return OutputKind::replace;
  if (S_ISDIR(st.st_mode)) return *why = " is a folder: name a file", OutputKind::refuse;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return OutputKind::write_through;
  if (S_ISLNK(st.st_mode)) {
    // /dev/stdout, a link to a terminal or a pipe: written into, as a shell's `>` does. A link
    // to a file is never replaced by one, nor its target rewritten behind the user's back.
    struct stat target {};
    if (stat(path.c_str(), &target) == 0 && (S_ISCHR(target.st_mode) || S_ISFIFO(target.st_mode)))
      return OutputKind::write_through;
    *why = " is a symbolic link: vramtrace never replaces one (name the file it points to)";
    return OutputKind::refuse;
  }
  *why = " is not a regular file (a block device or a socket): name a file";
  return OutputKind::refuse;
}

namespace {

bool say_cannot_write(const std::string& path, const std::string& why) {
  std::cerr << "vramtrace: cannot write " << report::printable(path) << ": " << why << "\n";
  return false;
}

bool write_all(int fd, const std::string& content) {
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// A character device or a FIFO gets the bytes written into it (a FIFO waits for its reader).
bool write_through(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return say_cannot_write(path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    close(fd);  // it changed since it was looked at: never written into as if it were a device
    return say_cannot_write(path, "it changed while being opened");
  }
  if (!write_all(fd, content)) {
    const int err = errno ? errno : EIO;
    close(fd);
    return say_cannot_write(path, std::strerror(err));
  }
  if (close(fd) != 0) return say_cannot_write(path, std::strerror(errno));
  return true;
}

}  // namespace

std::string stage_private_file(const std::string& path, const std::string& content) {
  fs::path target(path);
  std::string dir = target.parent_path().string();
  std::string tmp =
      (dir.empty() ? std::string(".") : dir) + "/." + target.filename().string() + ".tmp-XXXXXX";
  auto fail = [&](int err) {
    say_cannot_write(path, std::strerror(err));
    return std::string();
  };
  int fd = mkostemp(tmp.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) return fail(errno);
  if (!write_all(fd, content)) {
    int err = errno ? errno : EIO;
    close(fd);
    unlink(tmp.c_str());
    return fail(err);
  }
  // A full disk may answer only now (delayed allocation).
  if (fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return fail(err);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return fail(err);
  }
  return tmp;
}

bool commit_private_file(const std::string& tmp, const std::string& path) {
  // rename() replaces the name itself: only a regular file (or nothing) is ever replaced, never
  // a link, a device or a FIFO that took the name meanwhile.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    unlink(tmp.c_str());
    std::string why;
    output_kind(path, &why);
    return say_cannot_write(path,
                            (why.empty() ? std::string(" is not a regular file") : why).substr(1));
  }
  if (rename(tmp.c_str(), path.c_str()) == 0) return true;
  const int err = errno;
  unlink(tmp.c_str());
  return say_cannot_write(path, std::strerror(err));
}

int stdout_checked(int rc) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && std::cout.good() && !std::ferror(stdout)) return rc;
  std::cerr << "vramtrace: the output could not be written to stdout"
            << (err ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
  return rc == 0 ? kExitWriteFailed : rc;
}

bool write_private_file(const std::string& path, const std::string& content) {
  std::string why;
  switch (output_kind(path, &why)) {
    case OutputKind::refuse: return say_cannot_write(path, why.substr(1));
    case OutputKind::write_through: return write_through(path, content);
    case OutputKind::replace: break;
  }
  std::string tmp = stage_private_file(path, content);
  return !tmp.empty() && commit_private_file(tmp, path);
}

std::vector<std::string> input_files(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().filename() == "report.json" || entry.path().extension() == ".vtrace" ||
        collector::is_run_file(entry.path()))
      out.push_back(entry.path().string());
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  const bool has_a = stat(a.c_str(), &sa) == 0, has_b = stat(b.c_str(), &sb) == 0;
  if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (has_a != has_b) return false;
  std::error_code ea, eb;
  return fs::weakly_canonical(fs::absolute(a, ea), ea) ==
         fs::weakly_canonical(fs::absolute(b, eb), eb);
}

bool output_file_allowed(const std::string& path, const char* option, bool force,
                         const std::vector<std::string>& inputs, const char* who) {
  auto refuse = [&](const std::string& why) {
    if (who) std::cerr << who << ": " << option << " " << report::printable(path) << why << "\n";
    return false;
  };
  // --force is for an earlier output; a report read by this very command is never one.
  for (const auto& in : inputs)
    for (const auto& file : input_files(in))
      if (same_file(path, file))
        return refuse(" is read or written by this command (" + report::printable(file) +
                      "): name another file");
  std::string why;
  switch (output_kind(path, &why)) {
    case OutputKind::refuse: return refuse(why);
    case OutputKind::write_through:
      return true;  // nothing is replaced: the bytes go into the device or FIFO
    case OutputKind::replace: break;
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return true;
  if (!force) return refuse(" exists: use --force to replace it, or name another file");
  return true;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool* ok) {
  collector::RunInputs in = collector::run_inputs(inputs);
  for (const auto& note : in.notes) std::cerr << "vramtrace: " << report::printable(note) << "\n";
  for (const auto& error : in.errors)
    std::cerr << "vramtrace: " << report::printable(error) << "\n";
  *ok = in.errors.empty();
  return in.files;
}

}  // namespace vramtrace::cli

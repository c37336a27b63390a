// Helpers of the end-to-end tests: run a shell command, make a temporary directory, find the
// built programs, the traces a run wrote and its report. Paths come from the build (VT_BUILD_DIR).
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

inline constexpr uint64_t MiB = 1 << 20;
inline const std::string kBuild = VT_BUILD_DIR;
inline const std::string kVramtrace = kBuild + "/bin/vramtrace";
// What LD_PRELOAD holds for a target. Sanitizer builds put the sanitizer runtime first
// (cmake/Sanitize.cmake), and leave the unsanitized target's own leaks and SIGSEGV to it.
#ifndef VT_SANITIZER_PRELOAD
inline const std::string kLib = kBuild + "/lib/libvramtrace.so";
#else
inline const std::string kLib = VT_SANITIZER_PRELOAD + kBuild +
                                "/lib/libvramtrace.so ASAN_OPTIONS=detect_leaks=0:handle_segv=0 "
                                "TSAN_OPTIONS=handle_segv=0";
#endif
inline const std::string kEnv = "LD_LIBRARY_PATH=" + kBuild + "/standin ";

inline std::string prog(const std::string& name) { return kBuild + "/tests/programs/" + name; }

// The environment of a Python program on the fake torch (tests/programs/fake_torch) over the
// stand-in: its cudart and a device of `device_mib`. PyTorch's allocator trace on throughout, as
// --torch=full has it: by default it is sampled or not by the time of an iteration, which a
// test cannot fix.
inline std::string fake_torch_env(uint64_t device_mib = 80) {
  return "FAKE_TORCH_CUDART=" + kBuild + "/standin/libcudart.so.13 PYTHONPATH=" + VT_SOURCE_DIR +
         "/tests/programs/fake_torch VRAMTRACE_STANDIN_DEVICE_BYTES=" +
         std::to_string(device_mib << 20) + " VRAMTRACE_TORCH_TRACE=full";
}

struct Result {
  int status;  // as from waitpid
  std::string out;
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  // Whether the command died of `sig` (the shell may report that as exit code 128+sig).
  bool died_of(int sig) const {
    return (WIFSIGNALED(status) && WTERMSIG(status) == sig) || code() == 128 + sig;
  }
};

// Runs a shell command, stdout and stderr together into `out`.
inline Result sh(const std::string& cmd) {
  std::string full = "(" + cmd + ") 2>&1";
  FILE* p = popen(full.c_str(), "r");
  Result r{0, {}};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}

// The temporary directories made during the current test case; main.cpp's listener removes
// them when the case passes and names them when it fails (VT_KEEP_TEMP=1 keeps them all).
inline std::vector<std::string>& temp_dirs_of_case() {
  static std::vector<std::string> dirs;
  return dirs;
}

inline std::string temp_dir() {
  namespace fs = std::filesystem;
  std::string t = (fs::temp_directory_path() / "vt-e2e-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  temp_dirs_of_case().push_back(t);
  return t;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A report.json conforms to its contract, report/report.schema.json: checked with a real
// JSON Schema validator (tests/contract/validate_report.py, python3-jsonschema).
inline void require_valid_report(const std::string& path) {
  Result r = sh("python3 " + std::string(VT_SOURCE_DIR) + "/tests/contract/validate_report.py '" +
                path + "'");
  INFO("report.schema.json: " << r.out);
  REQUIRE(r.code() == 0);
}

// The diagnosis' remedy of `kind` (a failed test when there is none).
inline const nlohmann::json& remedy(const nlohmann::json& remedies, const std::string& kind) {
  for (const nlohmann::json& r : remedies)
    if (r["kind"] == kind) return r;
  FAIL("no remedy " << kind << " in " << remedies.dump());
  return remedies;
}

// A JSON file (a report.json), parsed; the file must exist. A report (it names its schema) is
// validated against the contract, so every report an end-to-end test reads is checked.
inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  if (j.is_object() && j.contains("schema")) require_valid_report(path);
  return j;
}

// The trace files (*.vtrace) in a directory, sorted by name.
inline std::vector<std::string> traces_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".vtrace") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

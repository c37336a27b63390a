// Start-up, fork and exit of the preloaded library.
//
// LD_PRELOAD loads this library into every process of the tree, most of which never touch CUDA
// (shells, `timeout`, compilers). The constructor therefore only arms it: it points
// CUDA_INJECTION64_PATH at this very file, and the CUDA driver calls InitializeInjection() at
// cuInit, in CUDA processes only. That is where the output is opened and CUPTI subscribed; a
// process that never calls cuInit writes nothing and pays nothing but this constructor.
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>

#include "common/env_names.h"
#include "common/format.h"
#include "interpose/hooks.h"
#include "interpose/notice.h"
#include "interpose/options.h"
#include "interpose/recorder.h"
#include "interpose/stacks.h"

namespace vramtrace::interpose {
namespace {

// The run this process belongs to, recorded with the process (among the variables of its
// job): `vramtrace report DIR` refuses to mix traces of different runs. Set by `vramtrace run`;
// without it, by the first process of the tree that loads this library, and inherited through
// the environment by the processes it starts.
constexpr const char* kRunIdVariable = env::kRunId;

std::atomic<bool> g_injected{false};
bool g_disabled = false;
pid_t g_armed_pid = 0;  // the process that loaded the library (not a fork of it)

size_t read_file(const char* path, char* out, size_t n) {
  FILE* f = fopen(path, "re");
  if (!f) return 0;
  size_t got = fread(out, 1, n, f);
  fclose(f);
  return got;
}

// Who this process is: written first, so every stream names its process, host and rank.
void record_process() {
  static char cmdline[16384];
  static char exe[PATH_MAX];
  static char host[256];
  static char ranks[1024];
  size_t cmd_len = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
  if (cmd_len > 0 && cmdline[cmd_len - 1] == '\0') --cmd_len;  // no trailing separator
  ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof exe);
  if (exe_len < 0) exe_len = 0;
  if (gethostname(host, sizeof host) != 0) host[0] = '\0';
  host[sizeof host - 1] = '\0';
  size_t r = 0;
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
                           "OMPI_COMM_WORLD_RANK", "PMI_RANK", kRunIdVariable}) {
    const char* v = getenv(name);
    if (v && r < sizeof ranks - 1)
      r += static_cast<size_t>(snprintf(ranks + r, sizeof ranks - r, "%s=%s\n", name, v));
  }
  if (r >= sizeof ranks) r = sizeof ranks - 1;
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t realtime =
      static_cast<uint64_t>(rt.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(rt.tv_nsec);
  size_t host_len = strnlen(host, sizeof host);
  RecordSlot slot(format::max_fixed_bytes<format::rec::Process>() + cmd_len +
                  static_cast<size_t>(exe_len) + host_len + r);
  if (!slot.ok()) return;
  slot.commit(format::put(slot.begin(), format::rec::Process{static_cast<uint64_t>(getpid()),
                                                             static_cast<uint64_t>(getppid()),
                                                             realtime,
                                                             now_ns(),
                                                             {host, host_len},
                                                             {exe, static_cast<size_t>(exe_len)},
                                                             {cmdline, cmd_len},
                                                             {ranks, r}}));
}

// What this library records, written once after the Process record when a setting is not its
// default: the reader must know that launches were not recorded (rather than that none
// happened). A trace recorded with the defaults has no Settings record, so that a reader from
// before the record existed still reads it.
void record_settings(bool launches) {
  RecordSlot slot(format::kMaxFixedRecordBytes);
  if (!slot.ok()) return;
  slot.commit(format::put(slot.begin(), format::rec::Settings{launches ? 1u : 0u, 0}));
}

// This process's start time (ns since the epoch), its pid and 64 random bits: unique to the
// tree, whoever else writes traces into the same folder.
void adopt_run_id() {
  const char* id = getenv(kRunIdVariable);
  if (id && *id) return;
  timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t random = 0;
  if (getrandom(&random, sizeof random, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof random))
    random = static_cast<uint64_t>(rt.tv_nsec) * 0x9e3779b97f4a7c15ull ^
             reinterpret_cast<uintptr_t>(&random);
  char made[80];
  snprintf(made, sizeof made, "%llx-%d-%016llx",
           static_cast<unsigned long long>(rt.tv_sec) * 1'000'000'000ull +
               static_cast<unsigned long long>(rt.tv_nsec),
           static_cast<int>(getpid()), static_cast<unsigned long long>(random));
  setenv(kRunIdVariable, made, 1);
}

void on_fork_child() {
  recorder_abandon_in_child();
  // A child of a process that had not yet initialised CUDA may still do so on its own.
  if (!recorder_running()) g_injected.store(false);
}

__attribute__((constructor)) void arm() {
  if (disabled_by_environment()) {
    g_disabled = true;
    return;
  }
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&arm), &info) || !info.dli_fname) return;
  char self[PATH_MAX];
  if (!realpath(info.dli_fname, self)) return;
  const char* current = getenv("CUDA_INJECTION64_PATH");
  if (current && *current) {
    char resolved[PATH_MAX];
    if (!realpath(current, resolved) || strcmp(resolved, self) != 0) {
      notice(
          "CUDA_INJECTION64_PATH already names another tool; vramtrace stays off in this "
          "process");
      g_disabled = true;
      return;
    }
  } else {
    setenv("CUDA_INJECTION64_PATH", self, 1);
  }
  // NVTX ranges become phases. Another NVTX tool (Nsight Systems) keeps its place; vramtrace
  // then records no ranges but works otherwise.
  const char* nvtx = getenv("NVTX_INJECTION64_PATH");
  if (!nvtx || !*nvtx) setenv("NVTX_INJECTION64_PATH", self, 1);
  pthread_atfork(nullptr, nullptr, on_fork_child);
  adopt_run_id();
  g_armed_pid = getpid();
}

// The status the program gave exit() (or main returned), as its parent sees it; -1: none yet.
// glibc hands it to on_exit() handlers only, and they run before this library's destructor
// (registered after the loader's own exit handler, they run before it).
std::atomic<int> g_exit_status{-1};

void note_exit_status(int status, void*) { g_exit_status.store(status & 0xff); }

// Only stores an int: the program's exit, its other handlers and its status are untouched.
void watch_exit_status() { on_exit(note_exit_status, nullptr); }

// The CUDA runtime and driver libraries among the process's loaded objects.
struct CudaLibraries {
  char runtime[64];  // the first libcudart.so* (its basename), "" without one
  bool driver;       // a libcuda.so* is loaded
};

int find_cuda_libraries(dl_phdr_info* info, size_t, void* data) {
  auto* found = static_cast<CudaLibraries*>(data);
  const char* name = info->dlpi_name;
  if (!name || !*name) return 0;
  const char* slash = strrchr(name, '/');
  const char* base = slash ? slash + 1 : name;
  if (strncmp(base, "libcudart.so", 12) == 0 && !found->runtime[0])
    snprintf(found->runtime, sizeof found->runtime, "%s", base);
  if (strncmp(base, "libcuda.so", 10) == 0) found->driver = true;
  return 0;
}

// Whether the loader could find the CUDA driver, libcuda.so.1: in a folder of LD_LIBRARY_PATH,
// among the libraries ldconfig lists in /etc/ld.so.cache (their names are strings in it), or in
// the loader's default folders. Looked up, never loaded: loading a driver at exit costs time.
bool driver_findable() {
  char path[PATH_MAX];
  auto in_folder = [&](const char* dir, size_t len) {
    if (len == 0 || len + sizeof "/libcuda.so.1" > sizeof path) return false;
    snprintf(path, sizeof path, "%.*s/libcuda.so.1", static_cast<int>(len), dir);
    return access(path, F_OK) == 0;
  };
  if (const char* dirs = getenv("LD_LIBRARY_PATH"))
    for (const char* d = dirs; *d;) {
      size_t len = strcspn(d, ":;");
      if (in_folder(d, len)) return true;
      d += len + (d[len] ? 1 : 0);
    }
  for (const char* dir :
       {"/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"})
    if (in_folder(dir, strlen(dir))) return true;
  FILE* f = fopen("/etc/ld.so.cache", "re");
  if (!f) return false;
  static const char kName[] = "libcuda.so.1";
  const size_t keep = sizeof kName - 1;
  static char buf[65536];
  size_t have = 0;
  bool found = false;
  while (!found) {
    size_t got = fread(buf + have, 1, sizeof buf - have, f);
    if (got == 0) break;
    have += got;
    found = memmem(buf, have, kName, sizeof kName) != nullptr;  // with its terminating NUL
    if (have > keep) {  // the tail may hold the start of the name
      memmove(buf, buf + have - keep, keep);
      have = keep;
    }
  }
  fclose(f);
  return found;
}

// A process that loaded a CUDA runtime where no CUDA driver can be loaded cannot start CUDA:
// its runtime answers each call with cudaErrorInsufficientDriver and the driver never calls
// InitializeInjection. Said once on stderr; under `vramtrace run` also sent to the launcher as
// a process that was not profiled, with this reason, so that the report names it instead of
// finding no process at all. (With a driver there, a runtime that never loaded it was only not
// used: the driver is loaded at the first call.)
void say_cuda_did_not_start() {
  CudaLibraries found{};
  dl_iterate_phdr(find_cuda_libraries, &found);
  if (!found.runtime[0] || found.driver || driver_findable()) return;
  char why[400];
  snprintf(why, sizeof why,
           "CUDA cannot start in this process: it loaded the CUDA runtime (%s) but no CUDA "
           "driver can be loaded (libcuda.so.1 not found: no driver installed, or not on the "
           "library path), so its CUDA calls answer 'CUDA driver version is insufficient for "
           "CUDA runtime version' and there is no device memory to profile",
           found.runtime);
  notice(why);
  const char* socket = getenv(env::kSocket);
  if (!socket || !*socket || g_injected.exchange(true)) return;
  ReentryGuard guard;
  if (!recorder_start(read_options())) return;
  record_process();
  const size_t n = strnlen(why, sizeof why);
  RecordSlot slot(16 + n);
  if (slot.ok()) slot.commit(format::put(slot.begin(), format::rec::Notice{{why, n}}));
}

// A process whose CUDA could not start says so first (say_cuda_did_not_start).
// A non-zero exit status goes right before ProcessExit: a native program that checks cudaMalloc
// and exits with its own error code after an OOM died of it, though exit() was clean. A zero one
// is not written (see the record), so that such a trace stays readable by older readers.
__attribute__((destructor)) void at_exit() {
  if (!g_disabled && !g_injected.load() && !recorder_running() && getpid() == g_armed_pid)
    say_cuda_did_not_start();
  const int status = g_exit_status.load();
  if (status > 0) {
    RecordSlot slot(format::max_fixed_bytes<format::rec::ExitStatus>());
    if (slot.ok())
      slot.commit(
          format::put(slot.begin(), format::rec::ExitStatus{static_cast<uint64_t>(status)}));
  }
  recorder_finish();
}

}  // namespace
}  // namespace vramtrace::interpose

// Called by the CUDA driver at cuInit (CUDA_INJECTION64_PATH). Returns 1: injection succeeded,
// whatever happened here, so that the target always runs on.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  using namespace vramtrace::interpose;
  ReentryGuard guard;
  if (g_disabled || g_injected.exchange(true)) return 1;
  const Options options = read_options();
  if (!recorder_start(options)) return 1;
  const bool launches = options.launches;
  if (options.bad_launches) {
    char why[160];
    snprintf(why, sizeof why,
             "VRAMTRACE_LAUNCHES=%.64s is not on or off; kernel launches are recorded (the "
             "default)",
             options.launches_value);
    notice(why);
  }
  record_process();
  watch_exit_status();
  if (!launches) record_settings(launches);
  stacks_init(options.stacks);  // the module map goes out before any stack that refers to it
  subscribe_cupti(launches, options.cupti, options.site_packages);
  return 1;
}

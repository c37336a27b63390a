// Test program for the live report (vramtrace run --serve, snapshots): a job that the test
// drives step by step through files in DIR, so that what the test sees never depends on the
// machine's speed. Each step i (1..STEPS) waits for DIR/step-<i>, marks iteration i
// (vramtrace_step), keeps 16 MiB more (grow_step: a growth per iteration) and writes
// DIR/done-<i>. Then it waits for DIR/oom, asks for OOM_MIB (default 1024) MiB, which fails on
// a small stand-in device, writes DIR/oom-done; waits for DIR/end, frees all and exits 0.
// Each file it writes holds its pid. A wait longer than 600 s ends it with exit 3.
//   live_steps DIR [STEPS [OOM_MIB]]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check.h"
#include "vramtrace.h"

namespace {

std::string g_dir;

bool wait_for(const std::string& name) {
  const std::string path = g_dir + "/" + name;
  for (int i = 0; i < 600 * 100; ++i) {
    if (access(path.c_str(), F_OK) == 0) return true;
    usleep(10 * 1000);
  }
  std::fprintf(stderr, "live_steps: %s never came\n", path.c_str());
  return false;
}

// Writes DIR/NAME (holding this process's pid) in one rename: never seen half-written.
void say(const std::string& name) {
  const std::string path = g_dir + "/" + name, tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "%d\n", static_cast<int>(getpid()));
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

extern "C" __attribute__((noinline)) void* grow_step() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16 * MiB));
  return p;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: live_steps DIR [STEPS [OOM_MIB]]\n");
    return 2;
  }
  g_dir = argv[1];
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  const size_t oom = (argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1024) * MiB;
  CHECK(cudaFree(nullptr));
  say("started");
  std::vector<void*> kept;
  for (int i = 1; i <= steps; ++i) {
    if (!wait_for("step-" + std::to_string(i))) return 3;
    vramtrace_step(i);
    kept.push_back(grow_step());
    say("done-" + std::to_string(i));
  }
  if (!wait_for("oom")) return 3;
  void* big = nullptr;
  const cudaError_t err = cudaMalloc(&big, oom);
  if (err != cudaErrorMemoryAllocation) {
    std::fprintf(stderr, "live_steps: expected an OOM, got %s\n", cudaGetErrorString(err));
    return 98;
  }
  cudaGetLastError();
  say("oom-done");
  if (!wait_for("end")) return 3;
  for (void* p : kept) CHECK(cudaFree(p));
  return 0;
}

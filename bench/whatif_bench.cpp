// Speed of the what-if replay (collector/predict/whatif.h): synthesises a PyTorch allocator trace
// of N block events (allocations and frees, half each, training-like: a forward's activations kept
// until the backward, temporaries freed at once, a mix of small and large sizes on two streams) and
// replays it through the allocator model on one core, under the defaults and under expandable
// segments. Prints events per second. Usage: vt_whatif_bench [EVENTS] (default 10,000,000).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "collector/ingest/torch_trace.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;

int main(int argc, char** argv) {
  const uint64_t events = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000000ull;
  TorchContext ctx;
  ctx.torch_version = "synthetic";
  std::mt19937_64 rng(42);
  auto size = [&]() -> uint64_t {
    const uint64_t r = rng() % 100;
    if (r < 55) return 512 + rng() % (1 << 20);           // small pool
    if (r < 90) return (1 << 20) + rng() % (9ull << 20);  // 20 MiB segments
    return (10ull << 20) + rng() % (190ull << 20);        // their own segments
  };
  uint64_t t = 1;
  std::vector<size_t> activations;
  while (ctx.blocks.size() * 2 < events) {
    // A forward: 200 requests, a third kept for the backward, the rest freed at once.
    for (int i = 0; i < 200 && ctx.blocks.size() * 2 < events; ++i) {
      TorchBlock b{0, 0, size(), t++, UINT64_MAX, (rng() % 8 == 0) ? 7u : 0u};
      if (i % 3 == 0) {
        activations.push_back(ctx.blocks.size());
      } else {
        b.free_ns = t++;
      }
      ctx.blocks.push_back(b);
    }
    // The backward frees the activations, newest first.
    while (!activations.empty()) {
      ctx.blocks[activations.back()].free_ns = t++;
      activations.pop_back();
    }
  }
  const uint64_t n = ctx.blocks.size() * 2;
  for (const char* conf : {"", "expandable_segments:True"}) {
    WhatIfSettings s;
    s.limit = 1ull << 40;
    if (*conf) s.alloc_conf = conf;
    const auto start = std::chrono::steady_clock::now();
    WhatIfResult r = replay(ctx, nullptr, 0, {}, 1ull << 40, s);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-26s %llu block events in %.2f s: %.2f M events/s (reserved peak %.2f GiB, %s)\n",
                *conf ? conf : "defaults", static_cast<unsigned long long>(n), secs,
                static_cast<double>(n) / secs / 1e6,
                static_cast<double>(r.reserved_peak_bytes) / (1ull << 30),
                r.fits() ? "fits" : "oom");
  }
  return 0;
}

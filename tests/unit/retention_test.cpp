// Unit tests of memory kept across iterations (collector/analysis/retention.h) on hand-made
// contexts: a model Net of three modules a, b, c whose forwards each make one 1 MiB block per
// module (and a 512 KiB scratch freed inside a), five iterations, without and with a backward that
// frees them.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>

#include "collector/analysis/retention.h"

using namespace vramtrace::collector;

namespace {

constexpr uint64_t MiB = 1 << 20;

// Iteration i runs from 1000 i + 100: forward, modules a, b, c (ids 2-4), and with `backward`
// a backward that frees what the forward kept.
TorchContext five_iterations(bool backward, uint64_t block_bytes) {
  TorchContext ctx;
  ctx.present = true;
  ctx.modules = {{"Net", "Net", "m.py", 1},
                 {"a", "L", "m.py", 2},
                 {"b", "L", "m.py", 3},
                 {"c", "L", "m.py", 4}};
  ctx.sites = {{"eval.py", "main", 25}};
  for (uint64_t i = 0; i < 5; ++i) {
    const uint64_t t = 1000 * i + 100;
    ctx.marks.push_back({t - 1, MarkKind::Site, 1, false});
    ctx.marks.push_back({t, MarkKind::Forward, 1, false});
    for (uint32_t m = 2; m <= 4; ++m) {
      ctx.marks.push_back({t + 20 * (m - 1) - 10, MarkKind::Module, m, false});
      ctx.marks.push_back({t + 20 * (m - 1), MarkKind::ModuleEnd, m, false});
    }
    ctx.marks.push_back({t + 90, MarkKind::ForwardEnd, 1, false});
    if (backward) {
      ctx.marks.push_back({t + 100, MarkKind::Backward, 0, false});
      ctx.marks.push_back({t + 200, MarkKind::BackwardEnd, 0, false});
    }
    const uint64_t freed = backward ? t + 150 : UINT64_MAX;
    for (uint32_t m = 0; m < 3; ++m)
      ctx.blocks.push_back({0, 0x100000 * (10 * i + m + 1), block_bytes, t + 20 * m + 15, freed});
    ctx.blocks.push_back({0, 0x100000 * (10 * i + 9), MiB / 2, t + 16, t + 18});
  }
  return ctx;
}

}  // namespace

TEST_CASE("retention: forwards whose graphs no backward consumed are a kept graph") {
  TorchMemory tm(five_iterations(false, MiB));
  REQUIRE(tm.iterations().size() == 5);
  // At 4500 iteration 4 runs: iterations 0-2 are judged (each kept 3 MiB), 0-3 kept in all.
  auto k = kept_across_iterations(tm, 0, 4500);
  REQUIRE(k);
  REQUIRE(k->kind == KeptKind::Graph);
  REQUIRE(k->bytes_per_iteration == 3 * MiB);
  REQUIRE(k->kept_bytes == 12 * MiB);
  REQUIRE(k->iterations_keeping == 3);
  REQUIRE(k->iterations == 5);
  REQUIRE(k->first_iteration == 0);
  REQUIRE_FALSE(k->backward);
  REQUIRE(k->site == "eval.py:25");
  REQUIRE(k->modules == std::vector<std::pair<std::string, uint64_t>>{
                            {"a", 4 * MiB}, {"b", 4 * MiB}, {"c", 4 * MiB}});
  REQUIRE(k->blocks.size() == 12);
  // In use at 4500: the five iterations' 15 MiB. Without what earlier iterations made the most
  // was one iteration's 3 MiB and its scratch (a's 1 MiB with the 512 KiB scratch, then b, c);
  // keeping the previous one, 6 MiB; one graph and the previous forward's outputs (c's block,
  // made from its last module call on) until the forward returns, 4 MiB. No graph at all: the
  // previous and the current forward's outputs, 2 MiB.
  REQUIRE(k->in_use == 15 * MiB);
  REQUIRE(k->peak_without_kept == 3 * MiB);
  REQUIRE(k->peak_keeping_previous == 6 * MiB);
  REQUIRE(k->peak_one_graph == 4 * MiB);
  REQUIRE(k->peak_without_graphs == 2 * MiB);
  REQUIRE(kept_title(*k) ==
          "Each forward's autograd graph stays alive: 3.00 MiB per iteration of activations that "
          "no backward consumed (called at eval.py:25), 12.00 MiB kept from 3 earlier iterations");
  // Two iterations begun: none judged yet.
  REQUIRE_FALSE(kept_across_iterations(tm, 0, 1500));
}

TEST_CASE("retention: what a backward frees is not kept, and too little is not a cause") {
  TorchMemory trained(five_iterations(true, MiB));
  REQUIRE_FALSE(kept_across_iterations(trained, 0, 4500));
  // 256 KiB blocks: 768 KiB an iteration, under the 1 MiB that counts.
  TorchMemory small(five_iterations(false, MiB / 4));
  REQUIRE_FALSE(kept_across_iterations(small, 0, 4500));
}

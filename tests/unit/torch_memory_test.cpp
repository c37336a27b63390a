// Unit tests of the classification of PyTorch's blocks (collector/model/torch_memory.h) on
// hand-made contexts: a forward that ended and one the program died in, the moment the allocator's
// state is read for a driver allocation (the device's peak), and private pools' blocks.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>

#include "collector/analysis/categories.h"
#include "collector/model/allocation.h"
#include "collector/model/torch_memory.h"

using namespace vramtrace::collector;

namespace {

TorchContext one_forward(bool ended) {
  TorchContext ctx;
  ctx.present = true;
  ctx.modules.push_back({"Net", "Net", "train.py", 10});
  ctx.marks.push_back({100, MarkKind::Forward, 1, false});
  if (ended) ctx.marks.push_back({200, MarkKind::ForwardEnd, 1, false});
  ctx.blocks = {
      {0, 0x1000, 4096, 110, UINT64_MAX},  // never freed
      {0, 0x2000, 1024, 120, 130},         // freed inside the forward
      {0, 0x3000, 2048, 140, 300},         // freed after the forward's end (if it ended)
      {0, 0x4000, 512, 50, UINT64_MAX},    // made before it
  };
  return ctx;
}

}  // namespace

TEST_CASE("torch_memory: what a forward that ended made and kept is activations") {
  TorchMemory tm(one_forward(true));
  REQUIRE(tm.phases().size() == 1);
  REQUIRE(tm.phases()[0].end_ns == 200);
  REQUIRE(tm.info()[0].category == Category::Activations);
  REQUIRE(tm.info()[1].category == Category::Temporaries);
  REQUIRE(tm.info()[2].category == Category::Activations);
  REQUIRE(tm.info()[3].category == Category::Inputs);
  REQUIRE(tm.info()[0].module == 1);
  REQUIRE(tm.info()[0].phase == TorchPhase::Forward);
}

TEST_CASE("torch_memory: a forward the program died in keeps what it still held") {
  // No end mark: the forward is open when the trace ends (a fatal OOM inside it).
  TorchMemory tm(one_forward(false));
  REQUIRE(tm.phases().size() == 1);
  REQUIRE(tm.phases()[0].end_ns == UINT64_MAX);
  REQUIRE(tm.info()[0].category == Category::Activations);  // held when it died
  REQUIRE(tm.info()[1].category == Category::Temporaries);  // its own, freed inside
  REQUIRE(tm.info()[2].category == Category::Temporaries);  // freed before the trace ended
  REQUIRE(tm.info()[3].category == Category::Inputs);
}

TEST_CASE("torch_memory: the allocator's state for the peak, just after its segment's block") {
  TorchContext ctx;
  ctx.present = true;
  ctx.reserves = {{0, 0x100000, 100, 0x100000},   // a segment at 0x100000, 1 MiB
                  {0, 0x400000, 1000, 0x200000},  // the peak's segment, 2 MiB
                  {0, 0x400000, 4000, -0x200000},
                  {0, 0x400000, 5000, 0x200000}};  // the address again, later
  ctx.blocks = {{0, 0x100000, 0x1000, 150, UINT64_MAX},
                {0, 0x101000, 0x1000, 1002, UINT64_MAX},  // after it, in another segment
                {0, 0x400000, 0x180000, 1004, 3000},      // the block it was made for
                {1, 0x400000, 0x1000, 1001, UINT64_MAX},  // another device's
                {0, 0x400000, 0x1000, 5003, UINT64_MAX}};
  TorchMemory tm(std::move(ctx));
  // The driver's record comes microseconds before the allocator's, or (clocks) just after.
  REQUIRE(tm.after_segment(0, 0x400000, 998) == 1004);
  REQUIRE(tm.after_segment(0, 0x400000, 1001) == 1004);
  REQUIRE(tm.after_segment(0, 0x400000, 4999) == 5003);    // the later segment at that address
  REQUIRE(tm.after_segment(0, 0x700000, 80) == 150);       // a handle mapped at 0x100000 (VMM)
  REQUIRE(tm.after_segment(0, 0x700000, 10000) == 10000);  // no segment then: the peak itself
  REQUIRE(tm.after_segment(1, 0x400000, 1000) == 1000);    // no segment of device 1 there
  // Read then, the peak's block is live and counted.
  auto live = tm.live_at(0, tm.after_segment(0, 0x400000, 998));
  REQUIRE(live == std::vector<size_t>{0, 1, 2});
}

TEST_CASE("torch_memory: a private pool's blocks and free bytes, from its segment's making") {
  constexpr uint64_t MiB = 1 << 20;
  TorchContext ctx;
  ctx.present = true;
  ctx.reserves = {{0, 0x100000, 100, 2 * MiB},  // a default pool's segment
                  {0, 0x400000, 200, 4 * MiB},  // another, given back at 500 (empty_cache)
                  {0, 0x400000, 500, -4 * static_cast<int64_t>(MiB)},
                  {0, 0x400000, 600, 2 * MiB},  // a graph's pool takes the address again
                  {0, 0x800000, 700, 2 * MiB},  // a MemPool's
                  // Device 2: a default segment over the pool's range, given back at 60; the
                  // pool's own making was lost.
                  {2, 0x300000, 50, 2 * MiB},
                  {2, 0x300000, 60, -2 * static_cast<int64_t>(MiB)}};
  ctx.blocks = {{0, 0x100000, MiB, 150, UINT64_MAX},
                {0, 0x400000, MiB, 250, 400},          // the earlier segment's, not the pool's
                {0, 0x400000, MiB, 650, UINT64_MAX},   // the graph's
                {0, 0x500000, MiB / 2, 660, 680},      // the graph's, freed
                {0, 0x800000, MiB, 750, UINT64_MAX},   // the MemPool's
                {1, 0x400000, 4096, 10, UINT64_MAX},   // device 1: the segment's making was lost
                {1, 0x900000, 4096, 10, UINT64_MAX},   // device 1, past that segment
                {2, 0x400000, 4096, 55, 58},           // device 2: a default segment's
                {2, 0x400000, 4096, 65, UINT64_MAX}};  // the pool's, made after that went
  ctx.pool_segments = {{0, 0x400000, 2 * MiB, {1, 0}, true},
                       {0, 0x800000, 2 * MiB, {0, 1}, false},
                       {1, 0x400000, 2 * MiB, {0, 1}, false},
                       {2, 0x400000, 2 * MiB, {0, 1}, false}};
  TorchMemory tm(std::move(ctx));
  const auto cat = [&](size_t i) { return tm.info()[i].category; };
  REQUIRE(cat(0) == Category::Inputs);
  REQUIRE(cat(1) == Category::Inputs);
  REQUIRE(cat(2) == Category::PrivatePool);
  REQUIRE(cat(3) == Category::PrivatePool);
  REQUIRE(cat(4) == Category::PrivatePool);
  REQUIRE(cat(5) == Category::PrivatePool);
  REQUIRE(cat(6) == Category::Inputs);
  REQUIRE(cat(7) == Category::Inputs);
  REQUIRE(cat(8) == Category::PrivatePool);
  REQUIRE(tm.private_reserved_at(2, 59) == 0);
  REQUIRE(tm.private_reserved_at(2, 60) == 2 * MiB);
  REQUIRE(tm.private_reserved_at(0, 599) == 0);
  REQUIRE(tm.private_reserved_at(0, 600) == 2 * MiB);
  REQUIRE(tm.private_reserved_at(0, 700) == 4 * MiB);
  REQUIRE(tm.private_reserved_at(1, 0) == 2 * MiB);

  const auto index = [](Category c) { return static_cast<size_t>(c); };
  // At 300: the default pool's two segments (6 MiB), two blocks of 1 MiB.
  CategoryBytes c = categorize(tm, 0, 300, 6 * MiB, {}, nullptr);
  REQUIRE(c[index(Category::Inputs)] == 2 * MiB);
  REQUIRE(c[index(Category::PrivatePool)] == 0);
  REQUIRE(c[index(Category::AllocatorCache)] == 4 * MiB);
  // At 1000: 6 MiB reserved, 1 MiB more outside PyTorch's allocator; the pools' 4 MiB whole
  // (2 MiB in blocks), the default pool's 1 MiB free is the allocator's cache.
  c = categorize(tm, 0, 1000, 7 * MiB, {}, nullptr);
  REQUIRE(c[index(Category::Inputs)] == MiB);
  REQUIRE(c[index(Category::PrivatePool)] == 4 * MiB);
  REQUIRE(c[index(Category::AllocatorCache)] == MiB);
  REQUIRE(c[index(Category::OutsidePytorch)] == MiB);
  uint64_t sum = 0;
  for (uint64_t v : c) sum += v;
  REQUIRE(sum == 7 * MiB);

  // Over time: [PrivatePool] the pools' segments (or their blocks, were they more), and
  // [AllocatorCache] all that was reserved (the caller takes the blocks off).
  const auto series = tm.series(0, {300, 665, 1000});
  REQUIRE(series[0][index(Category::PrivatePool)] == 0);
  REQUIRE(series[0][index(Category::Inputs)] == 2 * MiB);
  REQUIRE(series[0][index(Category::AllocatorCache)] == 6 * MiB);
  REQUIRE(series[1][index(Category::PrivatePool)] == 2 * MiB);  // 1.5 MiB of blocks in 2
  REQUIRE(series[1][index(Category::Inputs)] == MiB);
  REQUIRE(series[1][index(Category::AllocatorCache)] == 4 * MiB);
  REQUIRE(series[2][index(Category::PrivatePool)] == 4 * MiB);
  REQUIRE(series[2][index(Category::AllocatorCache)] == 6 * MiB);

  const auto pools = tm.private_pools(0);
  REQUIRE(pools.size() == 2);
  REQUIRE(pools[0].pool_id[0] == 1);
  REQUIRE(pools[0].pool_id[1] == 0);
  REQUIRE(pools[0].cuda_graph);
  REQUIRE(pools[0].segments == 1);
  REQUIRE(pools[0].bytes == 2 * MiB);
  REQUIRE(pools[0].in_use_bytes == MiB);  // the freed half MiB is not in use
  REQUIRE(pools[1].pool_id[1] == 1);
  REQUIRE_FALSE(pools[1].cuda_graph);
  REQUIRE(pools[1].in_use_bytes == MiB);
  const auto on_one = tm.private_pools(1);
  REQUIRE(on_one.size() == 1);
  REQUIRE(on_one[0].in_use_bytes == 4096);
  REQUIRE(tm.private_pools(2).size() == 1);
  REQUIRE(tm.private_pools(2)[0].in_use_bytes == 4096);
  REQUIRE(tm.private_pools(3).empty());
}

TEST_CASE(
    "torch_memory: before a ring's window, an address's old name holds unless the dump "
    "named everything anew") {
  // The window starts at 1000. Before it the hook named a gradient at 0x100000 and a parameter
  // at 0x200000; the gradient was freed (set_to_none) and an input took its address, still
  // live at the dump (2000), where the hook named every storage again: the parameter, not the
  // input. Block 2 was freed inside the window: its old name is all there is.
  auto context = [](bool named_at_dump) {
    TorchContext ctx;
    ctx.present = true;
    ctx.window_start[0] = 1000;
    ctx.blocks = {{0, 0x100000, 0x1000, 999, UINT64_MAX},
                  {0, 0x200000, 0x1000, 999, UINT64_MAX},
                  {0, 0x300000, 0x1000, 999, 1500}};
    for (auto& b : ctx.blocks) b.before_window = true;
    ctx.labels = {{10, 0, 0x100000, 0x1000, "grad", "fc.weight.grad", "1024", "float32"},
                  {11, 0, 0x200000, 0x1000, "param", "fc.weight", "1024", "float32"},
                  {12, 0, 0x300000, 0x1000, "grad", "fc.bias.grad", "1024", "float32"}};
    if (named_at_dump) {
      ctx.labels.push_back({2000, 0, 0x200000, 0x1000, "param", "fc.weight", "1024", "float32"});
      ctx.marks.push_back({2001, MarkKind::Named, 0});
    }
    return ctx;
  };
  TorchMemory named(context(true));
  // Not the old gradient: made before the window, by no name known -> unclassified.
  REQUIRE(named.info()[0].category == Category::Unclassified);
  REQUIRE(named.info()[0].label == -1);
  REQUIRE(named.info()[1].category == Category::Parameters);
  REQUIRE(named.info()[2].category == Category::Gradients);
  // An older hook (no such mark): the latest name before the window, as before.
  TorchMemory old(context(false));
  REQUIRE(old.info()[0].category == Category::Gradients);
  REQUIRE(old.info()[1].category == Category::Parameters);
  REQUIRE(old.info()[2].category == Category::Gradients);
}

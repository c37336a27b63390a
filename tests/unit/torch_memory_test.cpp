// Unit tests of the classification of PyTorch's blocks (collector/torch_memory.h) on hand-made
// contexts: a forward that ended and one the program died in, and the moment the allocator's
// state is read for a driver allocation (the device's peak).
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>

#include "collector/torch_memory.h"

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
  REQUIRE(tm.after_segment(0, 0x400000, 4999) == 5003);  // the later segment at that address
  REQUIRE(tm.after_segment(0, 0x700000, 80) == 150);  // a handle mapped at 0x100000 (VMM)
  REQUIRE(tm.after_segment(0, 0x700000, 10000) == 10000);  // no segment then: the peak itself
  REQUIRE(tm.after_segment(1, 0x400000, 1000) == 1000);  // no segment of device 1 there
  // Read then, the peak's block is live and counted.
  auto live = tm.live_at(0, tm.after_segment(0, 0x400000, 998));
  REQUIRE(live == std::vector<size_t>{0, 1, 2});
}

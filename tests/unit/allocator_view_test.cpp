// Unit tests of the allocator's view (collector/model/allocator_view.h) and of reading PyTorch's
// allocator trace (collector/ingest/torch_trace.h): free blocks, the largest, joined mappings of
// expandable segments, inconsistent input, and the trace file's clock, order, private pools'
// segments and bad lines.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/model/allocator_view.h"
#include "collector/model/model.h"

using namespace vramtrace::collector;

namespace {
constexpr uint64_t MiB = 1 << 20;

Allocation block(uint64_t addr, uint64_t bytes) {
  Allocation a;
  a.id = addr;
  a.bytes = bytes;
  return a;
}

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/vt-torch-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::string p = std::string(path) + ".torch";
  std::rename(path, p.c_str());
  std::ofstream(p) << text;
  return p;
}
}  // namespace

TEST_CASE("free blocks of a segment follow allocations and frees") {
  PoolView v;
  const uint64_t base = 0x10000000;
  v.add_segment(base, 64 * MiB, false);
  REQUIRE(v.state().free_blocks == 1);
  REQUIRE(v.state().largest_free == 64 * MiB);
  for (int i = 0; i < 16; ++i) v.alloc_block(block(base + i * 4 * MiB, 4 * MiB));
  REQUIRE(v.state().free_blocks == 0);
  REQUIRE(v.state().in_use == 64 * MiB);
  for (int i = 0; i < 16; i += 2) REQUIRE(v.free_block(base + i * 4 * MiB));
  auto s = v.state();
  REQUIRE(s.free_blocks == 8);
  REQUIRE(s.largest_free == 4 * MiB);
  REQUIRE(s.free_bytes() == 32 * MiB);
  REQUIRE(s.external() == Approx(0.875));
  // Freeing a neighbour merges three free blocks into one of 12 MiB.
  REQUIRE(v.free_block(base + 1 * 4 * MiB));
  s = v.state();
  REQUIRE(s.free_blocks == 7);
  REQUIRE(s.largest_free == 12 * MiB);
  REQUIRE_FALSE(v.free_block(base + 1));  // no block starts there
}

TEST_CASE("a free block never spans two segments, even adjacent ones") {
  PoolView v;
  v.add_segment(0, 2 * MiB, false);
  v.add_segment(2 * MiB, 2 * MiB, false);
  auto s = v.state();
  REQUIRE(s.free_blocks == 2);
  REQUIRE(s.largest_free == 2 * MiB);
  REQUIRE(s.segments == 2);
  v.remove_segment(0, 2 * MiB, false);
  REQUIRE(v.state().reserved == 2 * MiB);
  REQUIRE(v.state().free_blocks == 1);
}

TEST_CASE("mapped pieces of an expandable segment join, and unmapping splits them") {
  PoolView v;
  v.add_segment(0, 20 * MiB, true);
  v.add_segment(20 * MiB, 20 * MiB, true);
  auto s = v.state();
  REQUIRE(s.segments == 1);
  REQUIRE(s.largest_free == 40 * MiB);
  // A block across the join.
  v.alloc_block(block(18 * MiB, 4 * MiB));
  s = v.state();
  REQUIRE(s.free_blocks == 2);
  REQUIRE(s.largest_free == 18 * MiB);
  REQUIRE(s.in_use == 4 * MiB);
  // Unmap the top 10 MiB: the upper free block shrinks from 18 to 8 MiB.
  v.remove_segment(30 * MiB, 10 * MiB, true);
  s = v.state();
  REQUIRE(s.reserved == 30 * MiB);
  REQUIRE(s.largest_free == 18 * MiB);
  REQUIRE(s.free_blocks == 2);
  v.remove_segment(0, 10 * MiB, true);  // and the bottom 10: 8 and 8 MiB free
  s = v.state();
  REQUIRE(s.reserved == 20 * MiB);
  REQUIRE(s.segments == 1);
  REQUIRE(s.largest_free == 8 * MiB);
  REQUIRE(s.free_blocks == 2);
}

TEST_CASE("inconsistent input keeps the counts consistent") {
  PoolView v;
  v.add_segment(0, 8 * MiB, false);
  v.alloc_block(block(0, 4 * MiB));
  v.alloc_block(block(2 * MiB, 4 * MiB));  // overlaps the first: counted, free blocks recounted
  auto s = v.state();
  REQUIRE(s.in_use == 8 * MiB);
  REQUIRE(s.free_blocks == 1);
  REQUIRE(s.largest_free == 2 * MiB);
  v.alloc_block(block(0, 1 * MiB));  // same address again: replaces the lost free
  REQUIRE(v.state().blocks == 2);
  v.alloc_block(block(100 * MiB, 1 * MiB));  // outside every segment
  REQUIRE(v.state().blocks == 3);
  REQUIRE(v.free_block(100 * MiB));
  REQUIRE(v.free_block(0));
  REQUIRE(v.free_block(2 * MiB));
  s = v.state();
  REQUIRE(s.in_use == 0);
  REQUIRE(s.free_blocks == 1);
  REQUIRE(s.largest_free == 8 * MiB);
  // A segment that overlaps a known one replaces it.
  v.add_segment(4 * MiB, 8 * MiB, false);
  REQUIRE(v.state().reserved == 8 * MiB);
}

TEST_CASE("a PyTorch trace file: clock, pools, stacks and the order of records") {
  // Epoch 1000 s = monotonic 10 s: an event at epoch 1000.5 s is at monotonic 10.5 s.
  std::string path = write_temp(
      "vramtrace.torch/1\t42\t1000000000000\t10000000000\t2.11.0\n"
      "F\t1\t/w/train.py\t7\tforward\n"
      "F\t2\t/w/train.py\t20\tmain\n"
      "E\t0\tsegment_map\t4096\t2097152\t0\t1000500000\t2\t\n"
      "E\t0\talloc\t4096\t512\t0\t1000500001\t1,2\t\n"
      "E\t0\tfree_requested\t4096\t512\t0\t1000500002\t\t\n"
      "E\t0\tfree_completed\t4096\t512\t0\t1000500003\t\t\n"
      "E\t0\toom\t0\t99\t0\t1000500004\t2\t777\n"
      "END\t5\n");
  TorchTrace t = read_torch_trace(path);
  REQUIRE(t.pid == 42);
  REQUIRE(t.problem.empty());
  REQUIRE(t.torch_version == "2.11.0");
  std::vector<vramtrace::format::RecordType> types;
  for (auto& e : t.events) types.push_back(e.record.type);
  using R = vramtrace::format::RecordType;
  REQUIRE(types == std::vector<R>{R::PyCode, R::PyCode, R::UserPool, R::UserSegment, R::PyStackNode,
                                  R::PyStackNode, R::AllocStack, R::UserBlock, R::UserBlock,
                                  R::AllocStack, R::UserOom});
  auto r = [&](size_t i) -> const vramtrace::format::Record& { return t.events[i].record; };
  REQUIRE(r(3).time_ns == 10500000000ull);
  REQUIRE(r(3).user_segment.op == vramtrace::format::SegmentOp::Map);
  REQUIRE(r(3).user_segment.pool == kTorchPoolBase);
  REQUIRE(r(8).user_block.bytes == 0);  // free_completed
  REQUIRE(r(10).user_oom.bytes == 99);
  REQUIRE(r(10).user_oom.free_plus_one == 778);  // device free + 1
  // The OOM's stack is main alone: a node made before.
  REQUIRE(r(9).alloc_stack.py_leaf == r(4).py_stack_node.id);
  // The stack of the block: main (outermost) then forward (innermost, the leaf).
  REQUIRE(r(4).py_stack_node.parent == 0);
  REQUIRE(r(5).py_stack_node.parent == r(4).py_stack_node.id);
  REQUIRE(r(6).alloc_stack.py_leaf == r(5).py_stack_node.id);
  std::remove(path.c_str());
}

TEST_CASE("PyTorch trace entries of one microsecond keep their order") {
  // Block A made, block B made, A freed, all in one microsecond: B was made while A was live.
  std::string path = write_temp(
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "E\t0\tsegment_alloc\t4096\t8192\t0\t1000500000\t\t\n"
      "E\t0\talloc\t4096\t1024\t0\t1000500000\t\t\n"
      "E\t0\talloc\t5120\t1024\t0\t1000500000\t\t\n"
      "E\t0\tfree_completed\t4096\t1024\t0\t1000500000\t\t\n"
      "E\t1\talloc\t4096\t1024\t0\t1000500000\t\t\n"
      "END\t5\n");
  TorchTrace t = read_torch_trace(path);
  REQUIRE(t.problem.empty());
  REQUIRE(t.context.reserves.size() == 1);
  REQUIRE(t.context.reserves[0].time_ns == 10500000000ull);
  const auto& b = t.context.blocks;
  REQUIRE(b.size() == 3);
  REQUIRE(b[0].alloc_ns == 10500000001ull);
  REQUIRE(b[1].alloc_ns == 10500000002ull);
  REQUIRE(b[0].free_ns == 10500000003ull);
  // Another device's entries have an order of their own.
  REQUIRE(b[2].device == 1);
  REQUIRE(b[2].alloc_ns == 10500000000ull);
  std::remove(path.c_str());
}

TEST_CASE("PyTorch trace files that are cut, corrupt or not one at all") {
  std::string cut = write_temp("vramtrace.torch/1\t42\t1\t1\tx\nE\t0\talloc\t1\t2\t0\t3\t\t\n");
  REQUIRE(read_torch_trace(cut).problem == "cut short after 1 entries (no END line)");
  std::string bad =
      write_temp("vramtrace.torch/1\t42\t1\t1\tx\nE\t0\talloc\tzz\t2\t0\t3\t\t\nEND\t1\n");
  TorchTrace b = read_torch_trace(bad);
  REQUIRE(b.problem == "line 2: bad event");
  REQUIRE(b.events.empty());
  std::string wrapped = write_temp("vramtrace.torch/1\t42\t1\t1\tx\nW\t0\t1000000\nEND\t0\n");
  REQUIRE(read_torch_trace(wrapped).problem ==
          "PyTorch's trace buffer of device 0 was full (1000000 entries): its earliest events "
          "are missing");
  std::string other = write_temp("vramtrace.torch/9\t42\t1\t1\tx\n");
  REQUIRE_THROWS_WITH(read_torch_trace(other), Catch::Contains("unknown version"));
  std::string junk = write_temp("\x01\x02garbage");
  REQUIRE_THROWS_WITH(read_torch_trace(junk), Catch::Contains("not a PyTorch allocator trace"));
  REQUIRE_THROWS_WITH(read_torch_trace("/nonexistent.torch"), Catch::Contains("cannot open"));
  for (auto* p : {&cut, &bad, &wrapped, &other, &junk}) std::remove(p->c_str());
}

TEST_CASE("A wrapped PyTorch ring: what was live before its window, from its frees and the dump") {
  // Realtime 1000 s, monotonic 10 s: an entry at 1000.5 s (in us) is at 10.5 s monotonic.
  // The window frees block 0x100000 (64 KiB) it never saw made, makes block 0x300000 in a
  // segment it made; the dump's state holds segment 0x0 (2 MiB, never seen made) with block
  // 0x0 (4 KiB) in use, and the window's own segment and block.
  std::string path = write_temp(
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "W\t0\t3\n"
      "E\t0\tfree_completed\t1048576\t65536\t0\t1000500000\t\t\n"
      "E\t0\tsegment_alloc\t3145728\t2097152\t0\t1000500001\t\t\n"
      "E\t0\talloc\t3145728\t8192\t0\t1000500002\t\t\n"
      "G\t0\t0\t2097152\n"
      "A\t0\t0\t4096\n"
      "G\t0\t3145728\t2097152\n"
      "A\t0\t3145728\t8192\n"
      "K\t10500000003\t7\t1\n"
      "END\t3\n");
  TorchTrace t = read_torch_trace(path);
  REQUIRE(t.problem ==
          "PyTorch's trace buffer of device 0 was full (3 entries): its earliest events are "
          "missing (what was live before them is read from the allocator's state at the end; "
          "VRAMTRACE_TORCH_MAX_ENTRIES raises the size)");
  const auto& ctx = t.context;
  REQUIRE(ctx.window_start.at(0) == 10500000000ull);
  REQUIRE(ctx.blocks.size() == 3);
  REQUIRE(!ctx.blocks[0].before_window);  // the window's own
  REQUIRE(ctx.blocks[0].address == 3145728);
  // Freed in the window: live from just before it until then.
  REQUIRE(ctx.blocks[1].before_window);
  REQUIRE(ctx.blocks[1].address == 1048576);
  REQUIRE(ctx.blocks[1].bytes == 65536);
  REQUIRE(ctx.blocks[1].alloc_ns == 10499999999ull);
  REQUIRE(ctx.blocks[1].free_ns == 10500000000ull);
  // In use at the dump, never seen made.
  REQUIRE(ctx.blocks[2].before_window);
  REQUIRE(ctx.blocks[2].address == 0);
  REQUIRE(ctx.blocks[2].bytes == 4096);
  REQUIRE(ctx.blocks[2].free_ns == UINT64_MAX);
  // Segment 0x0 from before the window; the window's segment once.
  REQUIRE(ctx.reserves.size() == 2);
  REQUIRE(ctx.reserves[0].address == 0);
  REQUIRE(ctx.reserves[0].time_ns == 10499999999ull);
  REQUIRE(ctx.reserves[0].delta == 2097152);
  REQUIRE(ctx.reserves[1].address == 3145728);
  std::remove(path.c_str());
}

TEST_CASE("PyTorch trace files list the private pools' segments at the dump") {
  std::string path = write_temp(
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "E\t0\tsegment_alloc\t4194304\t2097152\t0\t1000500000\t\t\n"
      "E\t0\talloc\t4194304\t1024\t0\t1000500001\t\t\n"
      "P\t0\t4194304\t2097152\t3\t0\tgraph\n"
      "P\t1\t8388608\t20971520\t0\t18446744073709551615\tpool\n"
      "END\t2\n");
  TorchTrace t = read_torch_trace(path);
  REQUIRE(t.problem.empty());
  const auto& segs = t.context.pool_segments;
  REQUIRE(segs.size() == 2);
  REQUIRE(segs[0].device == 0);
  REQUIRE(segs[0].address == 4194304);
  REQUIRE(segs[0].bytes == 2097152);
  REQUIRE(segs[0].pool_id[0] == 3);
  REQUIRE(segs[0].pool_id[1] == 0);
  REQUIRE(segs[0].cuda_graph);
  REQUIRE(segs[1].device == 1);
  REQUIRE(segs[1].address == 8388608);
  REQUIRE(segs[1].bytes == 20 * MiB);
  REQUIRE(segs[1].pool_id[1] == UINT64_MAX);
  REQUIRE_FALSE(segs[1].cuda_graph);
  // No module, mark or label, yet pools: the blocks have a category to be classified into.
  REQUIRE(t.context.present);
  REQUIRE(t.context.blocks.size() == 1);

  // A trace without them reads as before: no pools, nothing to classify.
  std::string plain = write_temp(
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "E\t0\tsegment_alloc\t4194304\t2097152\t0\t1000500000\t\t\n"
      "END\t1\n");
  TorchTrace p = read_torch_trace(plain);
  REQUIRE(p.problem.empty());
  REQUIRE(p.context.pool_segments.empty());
  REQUIRE_FALSE(p.context.present);

  // A bad one stops the reading there.
  for (const char* line : {"P\t0\t4194304\t2097152\t3\t0\tcustom\n",  // unknown kind
                           "P\t0\t4194304\t2097152\t3\tgraph\n",      // a field short
                           "P\t0\t0x400000\t2097152\t3\t0\tgraph\n",  // not a number
                           "P\t4096\t4194304\t2097152\t3\t0\tgraph\n"}) {
    INFO(line);
    std::string bad =
        write_temp(std::string("vramtrace.torch/2\t42\t1\t1\tx\n") + line + "END\t0\n");
    TorchTrace b = read_torch_trace(bad);
    REQUIRE(b.problem == "line 2: bad private pool segment");
    REQUIRE(b.context.pool_segments.empty());
    std::remove(bad.c_str());
  }
  std::remove(path.c_str());
  std::remove(plain.c_str());
}

TEST_CASE("PyTorch's trace off between the sampled iterations: each gap closed from its state") {
  // Realtime 1000 s, monotonic 10 s. The first window makes segment 0x200000 and blocks
  // 0x200000 (4 KiB) and 0x201000 (8 KiB); the trace goes off (peak 12 KiB). At the gap's end
  // the state holds the first block, not the second, and a new segment 0x800000 with a block
  // of 16 KiB (peak 64 KiB: it rose in the gap). The second window makes 0x201000 (1 KiB);
  // at the dump, off again, only the segment 0x200000 and that block are left.
  TorchTrace t =
      read_torch_trace(std::string(VT_FUZZ_CORPUS) + "/torch_trace/hook-v2-sampled.torch");
  REQUIRE(t.problem.empty());
  const auto& ctx = t.context;
  REQUIRE(ctx.blocks.size() == 4);
  // Live through the first gap, freed in the second: freed at the second's start.
  REQUIRE(ctx.blocks[0].address == 0x200000);
  REQUIRE(ctx.blocks[0].alloc_ns == 10500001000ull);
  REQUIRE(ctx.blocks[0].free_ns == 10600010001ull);
  REQUIRE_FALSE(ctx.blocks[0].in_gap);
  // Freed in the first gap: just after the trace went off.
  REQUIRE(ctx.blocks[1].address == 0x201000);
  REQUIRE(ctx.blocks[1].bytes == 8192);
  REQUIRE(ctx.blocks[1].free_ns == 10500010001ull);
  // Made in the first gap: when its end showed it; freed in the second.
  REQUIRE(ctx.blocks[2].address == 0x800000);
  REQUIRE(ctx.blocks[2].bytes == 16384);
  REQUIRE(ctx.blocks[2].alloc_ns == 10600000000ull);
  REQUIRE(ctx.blocks[2].free_ns == 10600010001ull);
  REQUIRE(ctx.blocks[2].in_gap);
  // The second window's own, live at the end.
  REQUIRE(ctx.blocks[3].address == 0x201000);
  REQUIRE(ctx.blocks[3].bytes == 1024);
  REQUIRE(ctx.blocks[3].alloc_ns == 10600005000ull);
  REQUIRE(ctx.blocks[3].free_ns == UINT64_MAX);
  REQUIRE_FALSE(ctx.blocks[3].in_gap);
  // The segment made in the first gap and given back in the second.
  REQUIRE(ctx.reserves.size() == 3);
  REQUIRE(ctx.reserves[1].address == 0x800000);
  REQUIRE(ctx.reserves[1].time_ns == 10600000000ull);
  REQUIRE(ctx.reserves[1].delta == 2097152);
  REQUIRE(ctx.reserves[2].time_ns == 10600010001ull);
  REQUIRE(ctx.reserves[2].delta == -2097152);
  REQUIRE(ctx.gaps.size() == 2);
  REQUIRE(ctx.gaps[0].start_ns == 10500010001ull);
  REQUIRE(ctx.gaps[0].end_ns == 10600000000ull);
  REQUIRE(ctx.gaps[1].end_peak == std::nullopt);
  // PyTorch's peak (64 KiB) rose to its high in the first gap.
  const auto peak = gap_of_peak(ctx, 0);
  REQUIRE(peak);
  REQUIRE(peak->start_ns == 10500010001ull);
  REQUIRE(*peak->end_peak == 65536);
  REQUIRE_FALSE(gap_of_peak(ctx, 1));
  // The events replay the same: at the end, 0x200000's segment and one block of 1 KiB.
  int64_t blocks = 0, reserved = 0;
  for (const TorchEvent& e : t.events) {
    if (e.record.type == vramtrace::format::RecordType::UserBlock)
      blocks += e.record.user_block.bytes ? 1 : -1;
    if (e.record.type == vramtrace::format::RecordType::UserSegment)
      reserved += e.record.user_segment.op == vramtrace::format::SegmentOp::AddSegment ? 1 : -1;
  }
  REQUIRE(blocks == 1);
  REQUIRE(reserved == 1);
}

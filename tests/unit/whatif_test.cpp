// The what-if engine (collector/predict/whatif.h): the model of PyTorch's CUDACachingAllocator,
// each rule with figures derived by hand from CUDACachingAllocator.cpp in the comments, and the
// replay of a recorded allocator trace.
#include <catch2/catch.hpp>

#include "collector/ingest/torch_trace.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;

namespace {
constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

AllocatorSettings conf(const std::string& c) {
  AllocatorSettings s;
  std::string error;
  INFO(error);
  REQUIRE(parse_alloc_conf(c, &s, &error));
  return s;
}
}  // namespace

TEST_CASE("whatif: round_size rounds to 512 B, or to a power-of-two division") {
  CachingAllocatorModel m({}, GiB, std::nullopt);
  CHECK(m.round_size(1) == 512);  // below kMinBlockSize: 512
  CHECK(m.round_size(512) == 512);
  CHECK(m.round_size(513) == 1024);  // 512 * ceil(513 / 512)
  CHECK(m.round_size(5 * MiB + 1) == 5 * MiB + 512);
  CachingAllocatorModel p(conf("roundup_power2_divisions:4"), GiB, std::nullopt);
  // 5 MiB + 1 lies in [4 MiB, 8 MiB), cut in 4 steps of 1 MiB: up to 6 MiB.
  CHECK(p.round_size(5 * MiB + 1) == 6 * MiB);
  CHECK(p.round_size(4 * MiB) == 4 * MiB);  // a power of two stays
  // 1200 B is not above 512 * 4 divisions: plain 512 B rounding.
  CHECK(p.round_size(1200) == 1536);
  // The list form: 1 (none) from 1 MiB, the same up to 256 MiB, 4 divisions in [256, 512) MiB.
  CachingAllocatorModel q(conf("roundup_power2_divisions:[1:1,256:4]"), GiB, std::nullopt);
  CHECK(q.round_size(5 * MiB + 1) == 5 * MiB + 512);
  CHECK(q.round_size(300 * MiB) == 320 * MiB);  // [256, 512) MiB in steps of 64 MiB
}

TEST_CASE("whatif: the small pool packs requests up to 1 MiB into 2 MiB segments") {
  CachingAllocatorModel m({}, GiB, std::nullopt);
  const int64_t a = m.malloc(1000, 0), b = m.malloc(1000, 0);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  CHECK(m.block_size(a) == 1024);
  CHECK(m.block_size(b) == 1024);
  CHECK(m.reserved() == 2 * MiB);  // one kSmallBuffer segment for both
  CHECK(m.allocated() == 2048);
  CHECK(m.block_address(b) == m.block_address(a) + 1024);  // split off the same segment
  const int64_t c = m.malloc(1 * MiB, 0);                  // 1 MiB is still small
  CHECK(m.block_size(c) == 1 * MiB);
  CHECK(m.reserved() == 2 * MiB);  // 2 MiB - 2048 B free was enough
}

TEST_CASE("whatif: the large pool takes 20 MiB segments under 10 MiB, splits them, rounds above") {
  CachingAllocatorModel m({}, GiB, std::nullopt);
  // 1 MiB + 1 rounds to 1 MiB + 512: large pool, a 20 MiB segment, split (19 MiB - 512 left
  // is more than kSmallSize).
  const int64_t a = m.malloc(MiB + 1, 0);
  CHECK(m.block_size(a) == MiB + 512);
  CHECK(m.reserved() == 20 * MiB);
  // 12 MiB fits the 19 MiB - 512 left: carved from it, no new segment.
  const int64_t b = m.malloc(12 * MiB, 0);
  CHECK(m.block_size(b) == 12 * MiB);
  CHECK(m.reserved() == 20 * MiB);
  CHECK(m.segment_allocs() == 1);
  // A fresh allocator: 11 MiB + 1 rounds to 11 MiB + 512, its segment to 12 MiB (2 MiB
  // rounding), and the 1 MiB - 512 left is not more than 1 MiB: not split, the block is 12 MiB.
  CachingAllocatorModel n({}, GiB, std::nullopt);
  const int64_t c = n.malloc(11 * MiB + 1, 0);
  CHECK(n.block_size(c) == 12 * MiB);
  CHECK(n.reserved() == 12 * MiB);
}

TEST_CASE("whatif: best fit by (stream, size)") {
  CachingAllocatorModel m({}, GiB, std::nullopt);
  const int64_t a = m.malloc(12 * MiB, 0);  // its own 12 MiB segment
  const int64_t b = m.malloc(14 * MiB, 0);  // its own 14 MiB segment
  const uint64_t a_at = m.block_address(a);
  m.free(a);
  m.free(b);
  // 11 MiB: the smallest free block that fits is the 12 MiB one; 1 MiB left is not more than
  // kSmallSize, so the whole block is handed out.
  const int64_t c = m.malloc(11 * MiB, 0);
  CHECK(m.block_address(c) == a_at);
  CHECK(m.block_size(c) == 12 * MiB);
  CHECK(m.reserved() == 26 * MiB);
  // Another stream cannot use stream 0's free 14 MiB block: a new segment.
  const int64_t d = m.malloc(14 * MiB, 7);
  CHECK(d >= 0);
  CHECK(m.reserved() == 40 * MiB);
}

TEST_CASE("whatif: an OOM only after freeing the cache and retrying") {
  CachingAllocatorModel m({}, 60 * MiB, std::nullopt);
  const int64_t x = m.malloc(30 * MiB, 0);
  m.free(x);  // 30 MiB cached
  // 40 MiB: no cached block fits; cudaMalloc would make 70 MiB of 60; release_cached_blocks
  // gives the unsplit 30 MiB segment back and the retry gets 40 MiB.
  const int64_t y = m.malloc(40 * MiB, 0);
  REQUIRE(y >= 0);
  CHECK(m.reserved() == 40 * MiB);
  CHECK(m.segment_frees() == 1);
  // 30 MiB more: 70 of 60 MiB and nothing cached to free: out of memory.
  CHECK(m.malloc(30 * MiB, 0) == -1);
  const AllocatorState st = m.state();
  CHECK(st.reserved_bytes == 40 * MiB);
  CHECK(st.allocated_bytes == 40 * MiB);
  CHECK(st.cached_free_bytes == 0);
  // Memory outside PyTorch counts against the device: 15 MiB of it leaves no room for 10 MiB
  // more (40 + 15 + 10 > 60), none does (40 + 10 <= 60).
  m.set_background(15 * MiB);
  CHECK(m.malloc(10 * MiB, 0) == -1);
  m.set_background(0);
  CHECK(m.malloc(10 * MiB, 0) >= 0);
}

TEST_CASE("whatif: max_split_size_mb turns a fragmentation OOM into a fit") {
  // Defaults, 100 MiB: a 60 MiB segment is freed, then split by a 30 MiB request (30 MiB left
  // is more than 1 MiB); 50 MiB does not fit the 30 MiB left, 60 + 50 > 100, and the segment
  // is split (its first half live): not released. Out of memory.
  {
    CachingAllocatorModel m({}, 100 * MiB, std::nullopt);
    m.free(m.malloc(60 * MiB, 0));
    REQUIRE(m.malloc(30 * MiB, 0) >= 0);
    CHECK(m.reserved() == 60 * MiB);
    CHECK(m.malloc(50 * MiB, 0) == -1);
    CHECK(m.state().largest_free_block == 30 * MiB);
  }
  // max_split_size_mb:40: the 60 MiB block is oversize, never split and not served to a 30 MiB
  // request, which gets a 30 MiB segment (90 MiB reserved); 50 MiB >= 40 takes the 60 MiB block
  // (60 < 50 + 20, max_non_split_rounding) whole.
  {
    CachingAllocatorModel m(conf("max_split_size_mb:40"), 100 * MiB, std::nullopt);
    m.free(m.malloc(60 * MiB, 0));
    REQUIRE(m.malloc(30 * MiB, 0) >= 0);
    CHECK(m.reserved() == 90 * MiB);
    const int64_t c = m.malloc(50 * MiB, 0);
    REQUIRE(c >= 0);
    CHECK(m.block_size(c) == 60 * MiB);
    CHECK(m.reserved() == 90 * MiB);
  }
}

TEST_CASE("whatif: expandable segments turn a fragmentation OOM into a fit") {
  // Defaults, 100 MiB: a freed 60 MiB segment split by a 2 MiB block (58 MiB free in it), then
  // 70 MiB: 60 + 70 > 100 and the split segment cannot be released. Out of memory.
  {
    CachingAllocatorModel m({}, 100 * MiB, std::nullopt, 100 * MiB);
    m.free(m.malloc(60 * MiB, 0));
    REQUIRE(m.malloc(2 * MiB, 0) >= 0);
    CHECK(m.malloc(70 * MiB, 0) == -1);
  }
  // expandable_segments: one segment per stream, 20 MiB pages (large pool), 120 MiB of address
  // space (ceil(112.5 / 20) pages). 60 MiB maps pages 0-2; 2 MiB splits it (58 MiB free at
  // 2 MiB); 70 MiB starts at that free block and maps one more page (60..80 MiB): the free
  // 58 MiB and the new 20 MiB merge into 78 MiB, 70 MiB of it handed out, 8 MiB left free.
  CachingAllocatorModel m(conf("expandable_segments:True"), 100 * MiB, std::nullopt, 100 * MiB);
  const int64_t a = m.malloc(60 * MiB, 0);
  CHECK(m.reserved() == 60 * MiB);
  const uint64_t base = m.block_address(a);
  m.free(a);
  const int64_t x = m.malloc(2 * MiB, 0);
  CHECK(m.block_address(x) == base);
  const int64_t y = m.malloc(70 * MiB, 0);
  REQUIRE(y >= 0);
  CHECK(m.block_address(y) == base + 2 * MiB);
  CHECK(m.block_size(y) == 70 * MiB);
  CHECK(m.reserved() == 80 * MiB);
  CHECK(m.state().largest_free_block == 8 * MiB);
  // On an OOM the free pages are unmapped: 30 MiB does not fit the 8 MiB free; mapping two
  // more pages (80 + 40 > 100) fails; release_cached_blocks unmaps nothing (the 8 MiB free
  // is no whole page): out of memory. Freeing the 2 MiB block and retrying leaves 2 MiB free
  // at the start, still no whole page.
  CHECK(m.malloc(30 * MiB, 0) == -1);
  CHECK(m.reserved() == 80 * MiB);
  // The free pages of one stream's segment are unmapped for another's: 60 MiB freed on stream
  // 0 stays mapped (cached); 60 MiB on stream 5 needs a segment of its own, and 60 + 60 > 100;
  // release_cached_blocks unmaps stream 0's three pages (its segment then wholly unmapped, and
  // released), and the retry maps stream 5's.
  CachingAllocatorModel e(conf("expandable_segments:True"), 100 * MiB, std::nullopt, 100 * MiB);
  e.free(e.malloc(60 * MiB, 0));
  CHECK(e.reserved() == 60 * MiB);
  REQUIRE(e.malloc(60 * MiB, 5) >= 0);
  CHECK(e.reserved() == 60 * MiB);
  CHECK(e.segment_frees() == 1);
  CHECK(e.peak_reserved() == 60 * MiB);
}

TEST_CASE("whatif: the per-process fraction caps what PyTorch reserves, not the device") {
  CachingAllocatorModel m({}, GiB, 50 * MiB);
  REQUIRE(m.malloc(30 * MiB, 0) >= 0);
  // 30 + 30 > 50 MiB allowed: refused by PyTorch itself, with 1 GiB on the device.
  CHECK(m.malloc(30 * MiB, 0) == -1);
  CHECK(m.malloc(20 * MiB, 0) >= 0);  // 30 + 20 = 50: allowed
  CHECK(m.reserved() == 50 * MiB);
}

TEST_CASE("whatif: garbage_collection_threshold frees the cached segments unused longest") {
  // Fraction 100 MiB, threshold 0.5: GC when PyTorch reserves more than 50 MiB and no cached
  // block fits. The large pool's get_free_block count: a (1), b on stream 2 (2), c on stream 2
  // (3, takes b's block), d on stream 3 (4). Ages then: A freed at 1 -> 3, B freed at 3 -> 1;
  // average 2: A (40 MiB) goes, B stays. 52 > 50 MiB reserved before; after: 12 + 30.
  auto run = [](const AllocatorSettings& s) {
    auto m = std::make_unique<CachingAllocatorModel>(s, GiB, 100 * MiB);
    m->free(m->malloc(40 * MiB, 1));
    m->free(m->malloc(12 * MiB, 2));
    m->free(m->malloc(12 * MiB, 2));
    REQUIRE(m->malloc(30 * MiB, 3) >= 0);
    return m;
  };
  auto gc = run(conf("garbage_collection_threshold:0.5"));
  CHECK(gc->reserved() == 42 * MiB);
  CHECK(gc->segment_frees() == 1);
  // Without it: 52 + 30 = 82 MiB is under the fraction, nothing is freed.
  auto plain = run({});
  CHECK(plain->reserved() == 82 * MiB);
  CHECK(plain->segment_frees() == 0);
}

TEST_CASE("whatif: PYTORCH_CUDA_ALLOC_CONF is read as the allocator reads it") {
  AllocatorSettings s;
  std::string error;
  CHECK_FALSE(parse_alloc_conf("expandable_segment:True", &s, &error));
  CHECK(error.find("unknown key 'expandable_segment'") != std::string::npos);
  CHECK(error.find("max_split_size_mb") != std::string::npos);        // the known ones listed
  CHECK_FALSE(parse_alloc_conf("max_split_size_mb:10", &s, &error));  // must be >= 20
  CHECK_FALSE(parse_alloc_conf("garbage_collection_threshold:1.5", &s, &error));
  CHECK_FALSE(parse_alloc_conf("roundup_power2_divisions:3", &s, &error));
  CHECK_FALSE(parse_alloc_conf("backend:cudaMallocAsync", &s, &error));
  CHECK(s.max_split_size == UINT64_MAX);  // unchanged by the refusals
  REQUIRE(
      parse_alloc_conf("max_split_size_mb:128, garbage_collection_threshold:0.6,"
                       "release_lock_on_cudamalloc:True",
                       &s, &error));
  CHECK(s.max_split_size == 128 * MiB);
  CHECK(s.garbage_collection_threshold == 0.6);
  CHECK(describe_settings(s) == "max_split_size_mb:128,garbage_collection_threshold:0.6");
}

TEST_CASE("whatif: alloc-conf values are read as PyTorch 2.11's ConfigTokenizer reads them") {
  // std::stoull and std::stod (AcceleratorAllocatorConfig::parseMaxSplitSize, toSizeT,
  // toDouble): the number a value starts with, the rest ignored; none, or out of range, is an
  // error that stops PyTorch, and is refused here.
  auto refusal = [](const std::string& c) {
    AllocatorSettings s;
    std::string error;
    CHECK_FALSE(parse_alloc_conf(c, &s, &error));
    CHECK(s.max_split_size == UINT64_MAX);
    return error;
  };
  // 23 digits: out of range for PyTorch (replayed before as no max_split_size_mb at all).
  CHECK(refusal("max_split_size_mb:12345678901234567890123") ==
        "alloc-conf: max_split_size_mb: '12345678901234567890123' is out of range (PyTorch "
        "refuses a number past 2^64 - 1)");
  // 1e3 is 1 to stoull (it was 1000 MiB here): under the 20 MiB minimum.
  CHECK(refusal("max_split_size_mb:1e3") ==
        "alloc-conf: max_split_size_mb must be at least 20 (MiB), not '1e3' (PyTorch reads "
        "'1e3' as 1, the number it starts with)");
  CHECK(refusal("max_split_size_mb:abc") == "alloc-conf: max_split_size_mb: 'abc' is not a number");
  CHECK(refusal("max_split_size_mb:19") ==
        "alloc-conf: max_split_size_mb must be at least 20 (MiB), not '19'");
  CHECK(refusal("garbage_collection_threshold:1e-400") ==
        "alloc-conf: garbage_collection_threshold: '1e-400' is out of range of a double (PyTorch "
        "refuses it)");
  CHECK(refusal("garbage_collection_threshold:nan") ==
        "alloc-conf: garbage_collection_threshold must be in (0, 1), not 'nan'");
  CHECK(refusal("roundup_power2_divisions:0") ==
        "alloc-conf: roundup_power2_divisions must be a power of 2, not '0'");
  CHECK(refusal("release_lock_on_cudamalloc:1") ==
        "alloc-conf: release_lock_on_cudamalloc takes True or False, not '1'");
  CHECK(refusal("pinned_num_register_threads:256") ==
        "alloc-conf: pinned_num_register_threads must be a power of 2 up to 128, not '256'");
  CHECK(refusal("max_split_size_mb") ==
        "alloc-conf: 'max_split_size_mb' is not KEY:VALUE,KEY:VALUE... (at 'max_split_size_mb')");
  // What PyTorch takes: 20 MiB itself, the leading number of "1000.7" and "128MiB", digits
  // with whitespace between them (the tokenizer drops it), the largest count of MiB a size_t
  // holds for 2^64 - 1, a trailing comma.
  CHECK(conf("max_split_size_mb:20").max_split_size == 20 * MiB);
  CHECK(conf("max_split_size_mb:1000.7").max_split_size == 1000 * MiB);
  CHECK(conf("max_split_size_mb:128MiB").max_split_size == 128 * MiB);
  CHECK(conf("max_split_size_mb: 1 28 ,").max_split_size == 128 * MiB);
  CHECK(conf("max_split_size_mb:18446744073709551615").max_split_size == (UINT64_MAX >> 20) << 20);
  CHECK(conf("max_non_split_rounding_mb:+64").max_non_split_rounding == 64 * MiB);
  CHECK(conf("garbage_collection_threshold:0.5abc").garbage_collection_threshold == 0.5);
  CHECK(conf("garbage_collection_threshold:6e-1").garbage_collection_threshold == 0.6);
}

TEST_CASE("whatif: what the replay cannot take as the side channel recorded it is said") {
  // Recorded settings PyTorch would have refused to start under (an unknown key): not what
  // ran, so the replay under the defaults says so (it said nothing before). Blocks off CUDA's
  // 256-byte alignment: no allocator's.
  TorchContext ctx;
  ctx.blocks.push_back({0, 0x1000, 60 * MiB, 10, 20, 0});
  ctx.blocks.push_back({0, 0x1001, 2 * MiB, 30, UINT64_MAX, 0});
  ctx.blocks.push_back({0, 0x4000, 2 * MiB, 40, UINT64_MAX, 0});
  ctx.blocks.push_back({0, 0x4080, 2 * MiB, 50, UINT64_MAX, 0});
  ctx.alloc_conf = "foo:1,expandable_segments:True";
  WhatIfResult r = replay(ctx, nullptr, 0, {}, 100 * MiB, {});
  REQUIRE(r.ok);
  CHECK(r.conf.empty());  // the defaults: expandable_segments was not applied
  CHECK_FALSE(r.settings.expandable_segments);
  REQUIRE(r.problems.size() == 2);
  CHECK(r.problems[0] ==
        "2 of PyTorch's recorded blocks are at addresses no CUDA allocation has (not a multiple "
        "of 256; the first at 0x1001): the trace is not as PyTorch wrote it");
  CHECK(r.problems[1].rfind("the run's recorded allocator settings "
                            "'foo:1,expandable_segments:True' cannot be read (alloc-conf: unknown "
                            "key 'foo' (known: backend, ",
                            0) == 0);
  CHECK(r.problems[1].find("): replayed under PyTorch's defaults, which are not what ran") !=
        std::string::npos);
  // Settings that parse, at addresses PyTorch's allocator gives: nothing to say.
  ctx.blocks.resize(1);
  ctx.alloc_conf = "expandable_segments:True";
  r = replay(ctx, nullptr, 0, {}, 100 * MiB, {});
  REQUIRE(r.ok);
  CHECK(r.problems.empty());
  CHECK(r.settings.expandable_segments);
}

TEST_CASE("whatif: replaying a trace reproduces its OOM, and expandable segments fit it") {
  // The trace: a 60 MiB block made and freed, a 2 MiB block kept, then a 70 MiB request the
  // allocator refused with 20 MiB free on the 100 MiB device: the limit measured then is
  // 20 free + 60 reserved = 80 MiB... of which the process held 60 in its segment.
  TorchContext ctx;
  ctx.torch_version = "2.11.0";
  ctx.blocks.push_back({0, 0x1000, 60 * MiB, 10, 20, 0});
  ctx.blocks.push_back({0, 0x1000, 2 * MiB, 30, UINT64_MAX, 0});
  ctx.reserves.push_back({0, 0x1000, 9, static_cast<int64_t>(60 * MiB)});
  ctx.oom_requests.push_back({0, 40, 70 * MiB, 0, 20 * MiB});
  ctx.ooms.push_back(40);
  WhatIfSettings w;
  WhatIfResult r = replay(ctx, nullptr, 0, {}, 100 * MiB, w);
  REQUIRE(r.ok);
  CHECK(r.limit_bytes == 80 * MiB);
  CHECK(r.recorded_reserved_peak_bytes == 60 * MiB);
  REQUIRE(r.oom);
  CHECK(r.oom->recorded_request);
  CHECK(r.oom->requested_bytes == 70 * MiB);
  CHECK(r.oom->request_index == 2);
  CHECK(r.oom->time_ns == 40);
  CHECK(r.oom->state.cached_free_bytes == 58 * MiB);
  CHECK(r.reserved_peak_bytes == 60 * MiB);
  // expandable_segments: 60 + one 20 MiB page = 80 MiB, within the 80 MiB measured.
  w.alloc_conf = "expandable_segments:True";
  r = replay(ctx, nullptr, 0, {}, 100 * MiB, w);
  REQUIRE(r.ok);
  CHECK(r.fits());
  CHECK(r.reserved_peak_bytes == 80 * MiB);
  CHECK(r.truncated_at_recorded_oom);
  // Memory outside PyTorch from t = 35 on: under the same 80 MiB, 1 MiB of it leaves no room
  // for that page (60 + 1 + 20 > 80). (The limit measured at the OOM would count it as the
  // process's too: 81 MiB.)
  w.limit = 80 * MiB;
  r = replay(ctx, nullptr, 0, {{35, 1 * MiB}}, 100 * MiB, w);
  REQUIRE(r.ok);
  CHECK_FALSE(r.fits());
  // A batch scale needs the categories: refused without them.
  w.scale_batch = 2;
  r = replay(ctx, nullptr, 0, {}, 100 * MiB, w);
  CHECK_FALSE(r.ok);
  // No requests on device 1.
  r = replay(ctx, nullptr, 1, {}, 100 * MiB, {});
  CHECK_FALSE(r.ok);
}

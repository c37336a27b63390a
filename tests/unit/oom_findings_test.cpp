// The ranked findings of an OOM (collector/analysis/oom_findings.h) and growth by site
// (collector/analysis/leaks.h), from hand-built OOMs: which causes the figures support, their exact
// scores, ranks, evidence and words.
#include <catch2/catch.hpp>

#include "collector/analysis/leaks.h"
#include "collector/analysis/oom_findings.h"

using namespace vramtrace::collector;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

// A PyTorch process capped at a quarter of an 80 GiB GPU (set_per_process_memory_fraction).
ProcessModel capped_process() {
  ProcessModel p;
  TorchContext ctx;
  ctx.present = true;
  ctx.limits[0] = {0.25, 80 * GiB};
  p.torch_memory = std::make_shared<TorchMemory>(std::move(ctx));
  p.devices[0].total_bytes = 80 * GiB;
  return p;
}

// PyTorch's allocator refused a 2 GiB block under its fraction without asking the driver (no
// cuMemGetInfo of its own), holding 19 GiB.
OomEvent capped_oom() {
  OomEvent o;
  o.device = 0;
  o.requested_bytes = 2 * GiB;
  o.allocator = true;
  o.allocator_request = 2 * GiB;
  o.pool = "torch";
  o.live_bytes = 19 * GiB;
  o.driver_attempts = 0;
  return o;
}

OomFindingInput input_of(const OomEvent& o, const ProcessModel& p) {
  OomFindingInput in;
  in.oom = &o;
  in.held_by_others = held_by_others(o);
  EffectiveLimit lim = oom_limit(o, p);
  if (lim.kind != "device") in.limit = lim;
  return in;
}

std::vector<std::string> kinds(const std::vector<OomFinding>& v) {
  std::vector<std::string> out;
  for (const auto& f : v) out.push_back(finding_kind_name(f.kind));
  return out;
}

}  // namespace

TEST_CASE("oom findings: a process at PyTorch's per-process fraction reached its limit") {
  ProcessModel p = capped_process();
  OomEvent o = capped_oom();
  OomFindingInput in = input_of(o, p);
  REQUIRE(!in.held_by_others);  // the driver was not asked
  REQUIRE(in.limit);
  REQUIRE(in.limit->kind == "per_process_fraction");
  REQUIRE(in.limit->bytes == 20 * GiB);  // the device's capacity stands in for cuMemGetInfo's
  in.live_by_site = {{"train.py:40", 12 * GiB}};
  auto f = oom_findings(in);
  REQUIRE(kinds(f) == std::vector<std::string>{"limit_reached"});  // not near_capacity too
  REQUIRE(f[0].rank == 1);
  REQUIRE(f[0].score == 0.95);
  REQUIRE(f[0].title ==
          "The process reached its limit, PyTorch's per-process memory fraction (0.25 of 80.00 "
          "GiB: 20.00 GiB): it held 19.00 GiB when it asked for 2.00 GiB more");
  REQUIRE(*f[0].evidence.limit_bytes == 20 * GiB);
  REQUIRE(*f[0].evidence.live_bytes == 19 * GiB);
  REQUIRE(*f[0].evidence.requested_bytes == 2 * GiB);
  REQUIRE(*f[0].evidence.device_free_bytes == 0);
  REQUIRE(!f[0].evidence.total_bytes);
  REQUIRE(f[0].suggestion ==
          "Use less memory at the peak (the remedies below say how much each saves), or raise "
          "the fraction (torch.cuda.set_per_process_memory_fraction).");

  // Under the cap, a request that fits is no limit_reached (the OOM came from elsewhere).
  o.live_bytes = 17 * GiB;
  REQUIRE(oom_findings(input_of(o, p)).empty());

  // Others held 30 GiB of the card, and 31 GiB of it was still free: the cap refused the
  // request, the others took nothing this process could have had (not decisive, not first).
  o.live_bytes = 19 * GiB;
  o.total_bytes = 80 * GiB;
  o.free_bytes = 31 * GiB;
  REQUIRE(*held_by_others(o) == 30 * GiB);
  f = oom_findings(input_of(o, p));
  REQUIRE(kinds(f) == std::vector<std::string>{"limit_reached", "held_by_others"});
  REQUIRE(f[1].score == 0.4);
  REQUIRE(f[1].title ==
          "30.00 GiB of the GPU was held by other processes (or the driver) when it ran out");
}

TEST_CASE("oom findings: reserved free memory that would have served the request is the cause") {
  ProcessModel p = capped_process();
  OomEvent o = capped_oom();
  // 19 GiB of segments, 16 GiB of blocks in use: 3 GiB free, in 12 blocks of at most 512 MiB.
  FragmentationState fs;
  fs.reserved = 19 * GiB;
  fs.in_use = 16 * GiB;
  fs.free_blocks = 12;
  fs.largest_free = 512 * MiB;
  o.fragmentation = fs;
  OomFindingInput in = input_of(o, p);
  in.torch_pool = true;
  auto f = oom_findings(in);
  // Reaching the cap is the symptom: the memory was the process's already, in pieces.
  REQUIRE(kinds(f) == std::vector<std::string>{"fragmentation", "limit_reached"});
  REQUIRE(f[0].score == 0.97);
  REQUIRE(f[0].rank == 1);
  REQUIRE(f[1].rank == 2);
  REQUIRE(f[0].title ==
          "3.00 GiB reserved by torch was free, in 12 blocks, but the largest (512.00 MiB) is "
          "smaller than the request (2.00 GiB)");
  const FindingEvidence& e = f[0].evidence;
  REQUIRE(*e.requested_bytes == 2 * GiB);
  REQUIRE(*e.free_reserved_bytes == 3 * GiB);
  REQUIRE(*e.largest_free_block_bytes == 512 * MiB);
  REQUIRE(*e.free_blocks == 12);
  REQUIRE(*e.external_fragmentation == Approx(1.0 - 0.5 / 3.0));
  REQUIRE(f[0].suggestion.rfind("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", 0) == 0);

  // A pool of the program's own is told to size its segments instead.
  in.torch_pool = false;
  REQUIRE(oom_findings(in)[0].suggestion.rfind("The pool's free memory is split", 0) == 0);

  // One free block as large as the request: the allocator could have served it, no
  // fragmentation.
  o.fragmentation->largest_free = 2 * GiB;
  REQUIRE(kinds(oom_findings(input_of(o, p))) == std::vector<std::string>{"limit_reached"});
}

TEST_CASE("oom findings: reserved free memory and the device's together, or too little to matter") {
  // A native pool on an 80 GiB GPU: 768 MiB free in its segments (6 blocks of at most
  // 256 MiB), 512 MiB free on the device, a 1 GiB request.
  ProcessModel p;
  OomEvent o;
  o.allocator = true;
  o.allocator_request = 1 * GiB;
  o.requested_bytes = 1 * GiB;
  o.pool = "arena";
  o.total_bytes = 80 * GiB;
  o.free_bytes = 512 * MiB;
  o.live_bytes = 80 * GiB - 512 * MiB;
  FragmentationState fs;
  fs.reserved = 10 * GiB;
  fs.in_use = 10 * GiB - 768 * MiB;
  fs.free_blocks = 6;
  fs.largest_free = 256 * MiB;
  o.fragmentation = fs;
  auto f = oom_findings(input_of(o, p));
  REQUIRE(kinds(f) == std::vector<std::string>{"fragmentation", "near_capacity"});
  REQUIRE(f[0].score == 0.6);
  REQUIRE(f[1].score == 0.6);  // a tie keeps the order the causes are weighed in
  REQUIRE(f[0].title ==
          "768.00 MiB reserved but free and 512.00 MiB free on the device would together have "
          "served the request, but neither does alone");
  REQUIRE(f[1].title ==
          "This process held 79.50 GiB (99% of its limit) when it asked for 1.00 GiB");
  REQUIRE(f[1].evidence.top_sites.empty());

  // The device had the memory and the pool's free memory is an eighth of the request: the
  // pieces are not why it failed.
  o.free_bytes = 40 * GiB;
  o.live_bytes = 40 * GiB;
  o.fragmentation->in_use = 10 * GiB - 128 * MiB;
  o.fragmentation->largest_free = 32 * MiB;
  REQUIRE(oom_findings(input_of(o, p)).empty());
}

TEST_CASE("oom findings: memory other processes held, decisive or not") {
  ProcessModel p;
  OomEvent o;
  o.requested_bytes = 2 * GiB;
  o.total_bytes = 80 * GiB;
  o.free_bytes = 512 * MiB;
  o.live_bytes = 40 * GiB;
  REQUIRE(*held_by_others(o) == 80 * GiB - 512 * MiB - 40 * GiB);
  OomFindingInput in = input_of(o, p);
  REQUIRE(in.limit);
  REQUIRE(in.limit->kind == "other_processes");
  REQUIRE(in.limit->bytes == 40 * GiB + 512 * MiB);
  in.live_by_site = {{"train.py:12", 30 * GiB},
                     {"model.py:7", 6 * GiB},
                     {"data.py:3", 3 * GiB},
                     {"util.py:1", 1 * GiB}};
  auto f = oom_findings(in);
  REQUIRE(kinds(f) == std::vector<std::string>{"held_by_others", "near_capacity"});
  REQUIRE(f[0].score == 0.85);
  REQUIRE(f[0].title ==
          "39.50 GiB of the GPU was held by other processes (or the driver) when it ran out; "
          "without them the request would fit");
  REQUIRE(*f[0].evidence.held_by_others_bytes == 39 * GiB + 512 * MiB);
  REQUIRE(*f[0].evidence.free_bytes == 512 * MiB);
  REQUIRE(*f[0].evidence.this_process_bytes == 40 * GiB);
  REQUIRE(*f[0].evidence.requested_bytes == 2 * GiB);
  REQUIRE(f[1].title ==
          "This process held 40.00 GiB (98% of its limit) when it asked for 2.00 GiB, led by "
          "train.py:12");
  REQUIRE(f[1].evidence.top_sites.size() == 3);
  REQUIRE(f[1].evidence.top_sites[2] == std::pair<std::string, uint64_t>{"data.py:3", 3 * GiB});
  REQUIRE(*f[1].evidence.limit_bytes == 40 * GiB + 512 * MiB);

  // Under a GiB elsewhere (a context's own overhead) is not decisive, but a tenth of an 8 GiB
  // GPU is still worth saying.
  o.total_bytes = 8 * GiB;
  o.free_bytes = 100 * MiB;
  o.live_bytes = 8 * GiB - 900 * MiB - 100 * MiB;
  o.requested_bytes = 1 * GiB;
  REQUIRE(*held_by_others(o) == 900 * MiB);
  in = input_of(o, p);
  REQUIRE(!in.limit);  // the card's capacity is the limit
  f = oom_findings(in);
  REQUIRE(kinds(f) == std::vector<std::string>{"near_capacity", "held_by_others"});
  REQUIRE(f[0].title == "This process held 7.02 GiB (87% of its limit) when it asked for 1.00 GiB");
  REQUIRE(f[1].score == 0.4);
  REQUIRE(f[1].title ==
          "900.00 MiB of the GPU was held by other processes (or the driver) when it ran out");

  // The driver counted less in use than this process held: nothing was others'.
  o.free_bytes = 2 * GiB;
  REQUIRE(*held_by_others(o) == 0);
  o.free_bytes.reset();
  REQUIRE(!held_by_others(o));
}

TEST_CASE("oom findings: a request larger than the GPU comes first") {
  ProcessModel p;
  OomEvent o;
  o.requested_bytes = 100 * GiB;
  o.total_bytes = 80 * GiB;
  o.free_bytes = 71 * GiB;
  o.live_bytes = 9 * GiB;
  auto f = oom_findings(input_of(o, p));
  REQUIRE(kinds(f) == std::vector<std::string>{"request_too_large", "near_capacity"});
  REQUIRE(f[0].score == 1.0);
  REQUIRE(f[0].title == "The request alone (100.00 GiB) is larger than the GPU (80.00 GiB)");
  REQUIRE(*f[0].evidence.total_bytes == 80 * GiB);
}

TEST_CASE("growth by site: sites that kept what they allocated each iteration") {
  ProcessModel p;
  for (uint64_t t = 1000; t <= 10000; t += 1000) p.iterations.push_back(t);  // iterations 0..9
  std::vector<Allocation> live;
  auto add = [&](uint32_t stack, uint64_t bytes, int iteration) {
    Allocation a;
    a.stack = stack;
    a.bytes = bytes;
    a.time_ns = 1000 * static_cast<uint64_t>(iteration + 1) + 10;
    live.push_back(a);
  };
  add(1, 64 * MiB, -1);                                // set-up before the first iteration
  for (int i = 1; i <= 9; ++i) add(1, MiB, i);         // "a": 1 MiB kept from each of 1..9
  for (int i = 0; i <= 1; ++i) add(2, MiB, i);         // "b": only two iterations
  for (int i = 1; i <= 5; ++i) add(3, MiB, i);         // "c": stopped after iteration 5
  for (int i = 4; i <= 9; i += 2) add(4, 4 * MiB, i);  // "d": every other iteration from 4
  const SiteOf site = [](const Allocation& a) { return std::string(1, char('a' + a.stack - 1)); };
  auto g = growth_by_site(live, p, 10500, site);
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].site == "d");
  REQUIRE(g[0].bytes == 12 * MiB);
  REQUIRE(g[0].bytes_per_iteration == 12 * MiB / 5);  // iterations 4..8
  REQUIRE(g[0].iterations == 3);
  REQUIRE(g[0].first_iteration == 4);
  REQUIRE(g[0].last_iteration == 8);
  REQUIRE(g[1].site == "a");
  REQUIRE(g[1].bytes == 9 * MiB);
  REQUIRE(g[1].bytes_per_iteration == MiB);
  REQUIRE(g[1].iterations == 9);
  REQUIRE(g[1].since_ns == 2000);
  REQUIRE(g[1].example.stack == 1);

  // Fewer than 3 iterations before the moment: nothing is growth yet.
  REQUIRE(growth_by_site(live, p, 2500, site).empty());

  // At an OOM, growth that is a quarter of what the process held is a likely cause.
  OomEvent o;
  o.requested_bytes = 8 * MiB;
  o.live_bytes = 84 * MiB;
  OomFindingInput in;
  in.oom = &o;
  in.growth = g;
  auto f = oom_findings(in);
  REQUIRE(kinds(f) == std::vector<std::string>{"growth"});
  REQUIRE(f[0].score == 0.85);
  REQUIRE(f[0].title == "Live memory grew by 3.40 MiB per iteration since iteration 4, led by d");
  REQUIRE(*f[0].evidence.bytes_per_iteration == 12 * MiB / 5 + MiB);
  REQUIRE(*f[0].evidence.grown_bytes == 21 * MiB);
  REQUIRE(*f[0].evidence.iterations == 3);
  REQUIRE(*f[0].evidence.since_ns == 5000);
  REQUIRE(f[0].evidence.growth_sites.size() == 2);
  o.live_bytes = 85 * MiB;  // 21 MiB is less than a quarter of it
  REQUIRE(oom_findings(in)[0].score == 0.5);
}

TEST_CASE("growth by site: the trace's gaps hide the blocks' times, not the driver's") {
  // Iterations 0..19; PyTorch's trace off (--torch=sampled) from inside iteration 2 to inside
  // iteration 14: iterations 0, 1 and 15..19 are traced whole.
  ProcessModel p;
  for (uint64_t t = 1000; t <= 20000; t += 1000) p.iterations.push_back(t);
  auto ctx = std::make_shared<TorchContext>();
  TorchGap gap;
  gap.start_ns = 3500;
  gap.end_ns = 15500;
  ctx->gaps.push_back(gap);
  p.torch_context = ctx;
  // The allocator's segments made in iterations 0, 16, 17 and 18 (a batch that grows at the
  // end, as a job's before its OOM): 4 of 20 iterations, no growth; as blocks, 4 of the 7 traced.
  std::vector<Allocation> live;
  for (int i : {0, 16, 17, 18}) {
    Allocation a;
    a.stack = 1;
    a.bytes = MiB;
    a.time_ns = 1000 * static_cast<uint64_t>(i + 1) + 10;
    live.push_back(a);
  }
  const SiteOf site = [](const Allocation&) { return std::string("s"); };
  REQUIRE(growth_by_site(live, p, 20500, site).empty());
  for (Allocation& a : live) a.space = 1;
  auto g = growth_by_site(live, p, 20500, site);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].iterations == 4);
  REQUIRE(g[0].bytes_per_iteration == 4 * MiB / 6);  // over iterations 0, 1, 15..18 traced
}

TEST_CASE("oom findings: evidence as shown, each figure typed, the bytes first in their order") {
  OomFinding f;
  f.kind = FindingKind::KeptOutputs;
  FindingEvidence& e = f.evidence;
  e.requested_bytes = 2 * GiB;
  e.live_bytes = 19 * GiB;
  e.bytes_per_iteration = 512 * MiB;
  e.grown_bytes = 3 * GiB;
  e.free_blocks = 7;
  e.external_fragmentation = 0.25;
  e.iterations = 6;
  e.since_ns = 5000;
  e.kept_modules = {{"decoder", 2 * GiB}, {"head", GiB}};
  const std::vector<EvidenceItem> items = evidence_items(f);
  std::vector<std::string> labels;
  for (const auto& i : items) labels.push_back(i.label);
  // A kept finding's words for its growth, then the rest in their order.
  REQUIRE(labels == std::vector<std::string>{"kept per iteration", "kept from earlier iterations",
                                             "live in this process", "requested", "free blocks",
                                             "external fragmentation", "iterations kept",
                                             "growing since", "modules that made what was kept"});
  REQUIRE(*items[0].bytes == 512 * MiB);
  REQUIRE((!items[0].count && !items[0].fraction && !items[0].time_ns && items[0].sites.empty()));
  REQUIRE((*items[4].count == 7 && !items[4].bytes));
  REQUIRE((*items[5].fraction == 0.25 && !items[5].bytes));
  REQUIRE(*items[6].count == 6);
  REQUIRE(*items[7].time_ns == 5000);
  REQUIRE(items[8].sites ==
          std::vector<std::pair<std::string, uint64_t>>{{"decoder", 2 * GiB}, {"head", GiB}});
  // A growth finding says "growth" where a kept one says "kept".
  f.kind = FindingKind::Growth;
  REQUIRE(evidence_items(f)[0].label == "growth per iteration");
  REQUIRE(evidence_items(f)[6].label == "iterations grown");
}

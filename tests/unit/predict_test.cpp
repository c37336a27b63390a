// The prediction engine (collector/predict/): a step that never finished, completed from the
// start-up hook's fake-tensor prediction of it (the .torch file's N and R lines), then replayed
// through the allocator's model at the recorded batch, at another one (interpolated between the
// predicted batches, or scaled from the one step given) and under a limit; and the remedies'
// transforms of a stream. Every figure derived by hand from CUDACachingAllocator's rules below.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "collector/ingest/torch_trace.h"
#include "collector/ingest/torch_trace_reader.h"
#include "collector/model/model.h"
#include "collector/predict/plan.h"
#include "collector/predict/predicted_request.h"
#include "collector/predict/transforms.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;

namespace {
constexpr uint64_t MiB = 1ull << 20;

std::string write_temp(const std::string& text) {
  char name[] = "/tmp/vt_predict_XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  std::ofstream(name) << text;
  return name;
}

std::string mib(uint64_t n) { return std::to_string(n * MiB); }

// The run (realtime 1000 s = monotonic 10 s): the parameters W (40 MiB) made at 1000.1 s; the
// first step begins at 1000.2 s: fc1's output A1 (30 MiB), a 12 MiB cuDNN-like workspace made
// and freed, fc2's output A2 (30 MiB), then fc2's 50 MiB request fails with 400 MiB free on the
// device (the limit measured then: 400 + the 112 MiB reserved). Each block its own segment.
std::string recorded() {
  return "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
         "M\t1\tfc1\tLinear\tm.py\t1\n"
         "M\t2\tfc2\tLinear\tm.py\t2\n"
         "E\t0\tsegment_alloc\t1000000000\t" +
         mib(40) +
         "\t0\t1000100000\t\t\n"
         "E\t0\talloc\t1000000000\t" +
         mib(40) +
         "\t0\t1000100000\t\t\n"
         "E\t0\tsegment_alloc\t2000000000\t" +
         mib(30) +
         "\t0\t1000210000\t\t\n"
         "E\t0\talloc\t2000000000\t" +
         mib(30) +
         "\t0\t1000210000\t\t\n"
         "E\t0\tsegment_alloc\t3000000000\t" +
         mib(12) +
         "\t0\t1000220000\t\t\n"
         "E\t0\talloc\t3000000000\t" +
         mib(12) +
         "\t0\t1000220000\t\t\n"
         "E\t0\tfree_completed\t3000000000\t" +
         mib(12) +
         "\t0\t1000230000\t\t\n"
         "E\t0\tsegment_alloc\t4000000000\t" +
         mib(30) +
         "\t0\t1000240000\t\t\n"
         "E\t0\talloc\t4000000000\t" +
         mib(30) +
         "\t0\t1000240000\t\t\n"
         "E\t0\toom\t0\t" +
         mib(50) + "\t0\t1000250000\t\t" + mib(400) + "\n";
}

// The hook's step at batch `batch` (the run's was 8) of sizes linear in the batch: fc1's output
// (3.75 MiB a sample), fc2's (the same), fc2's 50 MiB at batch 8 freed in the loss, a loss
// temporary, then the backward frees both outputs and makes W's gradient (40 MiB, kept), and the
// optimizer step its state (40 MiB, kept).
std::string step(int id, uint64_t batch) {
  const std::string s = std::to_string(id);
  auto per = [&](uint64_t at8) { return std::to_string(at8 * MiB / 8 * batch); };
  return "N\t0\t" + s + "\t" + std::to_string(batch) + "\t8\t1000200000000\tok\n" + "R\t" + s +
         "\ta\t1\t" + per(30) + "\t1\tf\n" + "R\t" + s + "\ta\t2\t" + per(30) + "\t2\tf\n" + "R\t" +
         s + "\ta\t3\t" + per(50) + "\t2\tf\n" + "R\t" + s + "\tf\t3\t" + per(50) + "\t0\tl\n" +
         "R\t" + s + "\ta\t4\t" + per(20) + "\t0\tl\n" + "R\t" + s + "\tf\t4\t" + per(20) +
         "\t0\tl\n" + "R\t" + s + "\tf\t2\t" + per(30) + "\t0\tb\n" + "R\t" + s + "\ta\t5\t" +
         mib(40) + "\t1\tb\n" + "R\t" + s + "\tf\t1\t" + per(30) + "\t0\tb\n" + "R\t" + s +
         "\ta\t6\t" + mib(40) + "\t1\ts\n";
}

TorchContext context_of(const std::string& text) {
  const std::string path = write_temp(text + "END\t10\n");
  TorchTrace t = read_torch_trace(path);
  std::remove(path.c_str());
  INFO(t.problem);
  REQUIRE(t.problem.empty());
  return t.context;
}

WhatIfResult replay_at(const TorchContext& ctx, double scale, std::optional<uint64_t> limit = {}) {
  WhatIfSettings w;
  w.scale_batch = scale;
  w.limit = limit;
  WhatIfResult r = replay(ctx, nullptr, 0, {}, 2048 * MiB, w);
  INFO(r.error);
  REQUIRE(r.ok);
  return r;
}

}  // namespace

TEST_CASE("predict: the hook's N and R lines are read, a bad one stops the reading") {
  TorchContext ctx = context_of(recorded() + step(1, 8) +
                                "N\t0\t2\t4\t8\t1000200000000\tfake "
                                "tensors failed: an op without a meta "
                                "kernel\n");
  REQUIRE(ctx.predicted_steps.size() == 2);
  const TorchPredictedStep& s = ctx.predicted_steps[0];
  CHECK(s.batch == 8);
  CHECK(s.recorded_batch == 8);
  CHECK(s.time_ns == 10200000000ull);  // onto the monotonic clock
  REQUIRE(s.requests.size() == 10);
  CHECK(s.requests[3].free);
  CHECK(s.requests[3].phase == 'l');
  CHECK(s.requests[7].bytes == 40 * MiB);
  CHECK(s.requests[7].module == 1);
  CHECK(ctx.predicted_steps[1].status == "fake tensors failed: an op without a meta kernel");
  CHECK(ctx.predicted_steps[1].requests.empty());
  // A request of a step the hook could not predict, or of none declared: left out.
  for (const std::string other : {"R\t2\ta\t1\t512\t0\tf\n", "R\t3\ta\t1\t512\t0\tf\n"}) {
    TorchContext c =
        context_of(recorded() + step(1, 8) + "N\t0\t2\t4\t8\t1000200000000\tno\n" + other);
    CHECK(c.predicted_steps[0].requests.size() == 10);
    CHECK(c.predicted_steps[1].requests.empty());
  }
  // An unknown op or phase, block 0: "bad predicted request".
  for (const std::string bad :
       {"R\t1\tx\t1\t512\t0\tf\n", "R\t1\ta\t1\t512\t0\tq\n", "R\t1\ta\t0\t512\t0\tf\n"}) {
    const std::string path = write_temp(recorded() + step(1, 8) +
                                        "N\t0\t2\t4\t8\t1000200000000\tno\n" + bad + "END\t10\n");
    TorchTrace t = read_torch_trace(path);
    std::remove(path.c_str());
    CHECK(t.problem == "line 26: bad predicted request");
  }
}

TEST_CASE("predict: an impossible line of the side channel stops the reading, naming it") {
  // Each of these replayed before as if PyTorch had written it: a block of 2^64 - 1 bytes (the
  // replay's sums wrapped and it "fit"), times that wrap the monotonic clock.
  auto problem_of = [](std::string text) {
    const std::string path = write_temp(text + "END\t10\n");
    TorchTrace t = read_torch_trace(path);
    std::remove(path.c_str());
    return t.problem;
  };
  auto replaced = [](std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  const std::string ok = recorded();
  const std::string alloc = "E\t0\talloc\t1000000000\t" + mib(40) + "\t0\t1000100000";
  const std::string max = "18446744073709551615";
  // Line 5: the parameters' alloc (line 1 is the header).
  CHECK(problem_of(replaced(ok, alloc, "E\t0\talloc\t1000000000\t" + max + "\t0\t1000100000")) ==
        "line 5: bad event: alloc of 18446744073709551615 bytes");
  CHECK(problem_of(replaced(ok, "E\t0\tsegment_alloc\t1000000000\t" + mib(40),
                            "E\t0\tsegment_alloc\t1000000000\t0")) ==
        "line 4: bad event: segment_alloc of 0 bytes");
  // 2^48 bytes (256 TiB) is more than any device has; 2^48 - 256 is not refused by the reader.
  CHECK(
      problem_of(replaced(ok, alloc, "E\t0\talloc\t1000000000\t281474976710657\t0\t1000100000")) ==
      "line 5: bad event: alloc of 281474976710657 bytes");
  CHECK(problem_of(replaced(ok, alloc, "E\t0\talloc\t1000000000\t281474976710400\t0\t1000100000"))
            .empty());
  CHECK(problem_of(replaced(ok, alloc, "E\t0\talloc\t1000000000\t" + mib(40) + "\t0\t0")) ==
        "line 5: bad event: time 0 is before the traced host started (its clocks in the header)");
  CHECK(problem_of(replaced(ok, alloc, "E\t0\talloc\t1000000000\t" + mib(40) + "\t0\t" + max)) ==
        "line 5: bad event: time 18446744073709551615 is past 2^64 ns");
  // The request the run failed on may be any int64_t, no more.
  CHECK(problem_of(replaced(ok, "E\t0\toom\t0\t" + mib(50), "E\t0\toom\t0\t" + max)) ==
        "line 13: bad event: a request of 18446744073709551615 bytes (more than an int64_t)");
  // Line 14: the N line after the recorded twelve.
  CHECK(problem_of(ok + "N\t0\t1\t" + max + "\t8\t1000200000000\tok\n") ==
        "line 14: bad predicted step: a batch of 18446744073709551615 samples (more than any "
        "device has bytes)");
  const std::string n = "N\t0\t1\t8\t8\t1000200000000\tok\n";
  CHECK(problem_of(ok + n + "R\t1\ta\t1\t512\t0\tf\nR\t1\ta\t3\t512\t0\tf\n") ==
        "line 16: bad predicted request: block 3 made where block 2 comes next");
  CHECK(problem_of(ok + n + "R\t1\tf\t1\t512\t0\tf\n") ==
        "line 15: bad predicted request: block 1 freed before it was made");
  CHECK(problem_of(ok + n + "R\t1\ta\t1\t" + max + "\t0\tf\n") ==
        "line 15: bad predicted request: a block of 18446744073709551615 bytes");
  CHECK(problem_of(ok + step(1, 8)).empty());
}

TEST_CASE("predict: the run's requests are matched to the step's in work linear in both") {
  // A step of 100 mallocs, each followed by 999 frees, and 100 recorded requests of a size it
  // never makes, each looked for from the next malloc on: the old scan looked through the 32
  // mallocs ahead and every free between them (about 2.7 million requests for these 100); the
  // window passes each request once.
  std::vector<uint64_t> sizes;
  for (int m = 0; m < 100; ++m) {
    sizes.push_back(512 + static_cast<uint64_t>(m));
    sizes.insert(sizes.end(), 999, MallocWindow::kFree);
  }
  MallocWindow window(sizes, 32);
  for (size_t m = 0; m < 100; ++m) CHECK(window.find(m * 1000, 7) == SIZE_MAX);
  CHECK(window.looked_at() == 100000);
  // A size among the next 32 mallocs is found where it is; one 32 mallocs on is not.
  MallocWindow w2(sizes, 32);
  CHECK(w2.find(0, 512 + 31) == 31000);
  CHECK(w2.find(0, 512 + 32) == SIZE_MAX);
  CHECK(w2.find(1, 512 + 32) == 32000);    // from the second malloc on
  CHECK(w2.find(32001, 512) == SIZE_MAX);  // behind the cursor
}

TEST_CASE("predict: two predicted steps at one batch: the first is kept, and said") {
  // Steps at batches 4 and 8 (the run's), and a second at 8. At batch 16 the sizes are
  // extrapolated from 4 and 8: fc1's and fc2's outputs 60 MiB, fc2's request 100, the loss
  // temporary 40, the gradient and the state 40. W 40 (a segment), fc1's output 60 (a segment:
  // 100), the 12 MiB workspace (112) made and freed, fc2's output 60 (172), its request 100
  // (272), freed; the temporary split from it; the gradient from fc2's freed 60; the state from
  // fc1's: 272 MiB reserved. Between the two steps at 8 the interpolation divided by zero (a
  // 412 MiB peak on the H200's ResNet-50 at twice its batch, where 15.86 GiB was right).
  const TorchContext single = context_of(recorded() + step(1, 8) + step(2, 4));
  const TorchContext twice = context_of(recorded() + step(1, 8) + step(2, 4) + step(3, 8));
  const WhatIfResult a = replay_at(single, 2.0), b = replay_at(twice, 2.0);
  CHECK(a.reserved_peak_bytes == 272 * MiB);
  CHECK(b.reserved_peak_bytes == 272 * MiB);
  CHECK(a.problems.empty());
  REQUIRE(b.problems.size() == 1);
  CHECK(b.problems[0] ==
        "the start-up hook's predicted steps 1 and 3 are both at batch 8: step 3 is left out");
  REQUIRE(b.completion);
  CHECK(b.completion->method == "interpolated from the steps predicted at batches 4 and 8");
  CHECK(b.completion->batches == std::vector<uint64_t>{4, 8});
}

TEST_CASE("predict: steps that differ only in what they free after their last malloc align") {
  // The step at batch 4 lets go of block 5 (the gradient) after its last malloc, as a step whose
  // second iteration repeats the first can where the step run in full still held it: the sizes
  // are still read as a function of the batch (at twice the batch as in the test above: 272
  // MiB). A free of its own in the middle of the step is another program: the step at the
  // recorded batch alone, scaled.
  const std::string tail = "R\t2\tf\t5\t0\t0\ts\n";
  const WhatIfResult a = replay_at(context_of(recorded() + step(1, 8) + step(2, 4) + tail), 2.0);
  REQUIRE(a.completion);
  CHECK(a.completion->method == "interpolated from the steps predicted at batches 4 and 8");
  CHECK(a.reserved_peak_bytes == 272 * MiB);
  std::string moved = step(2, 4);
  const std::string last = "R\t2\ta\t6\t" + mib(40) + "\t1\ts\n";
  REQUIRE(moved.find(last) != std::string::npos);
  moved.replace(moved.find(last), last.size(), tail + last);
  const WhatIfResult b = replay_at(context_of(recorded() + step(1, 8) + moved), 2.0);
  REQUIRE(b.completion);
  CHECK(b.completion->method == "scaled from the step predicted at batch 8");
}

TEST_CASE("predict: a step that died in its forward, completed and replayed to the byte") {
  // Without a prediction the replay serves the failed request (a 50 MiB segment: 40 + 30 + 12
  // + 30 + 50 = 162 MiB) and can say no more: "fits as far as the run got".
  TorchContext bare = context_of(recorded());
  WhatIfResult r = replay_at(bare, 1.0);
  CHECK(r.reserved_peak_bytes == 162 * MiB);
  CHECK(r.truncated_at_recorded_oom);
  CHECK_FALSE(r.completion);

  // Completed: W, A1 (matched to the predicted fc1 output), the workspace and its free (no
  // predicted request of 12 MiB: kept where it came), A2, then the predicted rest: 50 MiB (a new
  // segment, 162), freed; the 20 MiB loss temporary split from it and freed; A2 freed; the
  // 40 MiB gradient split from the 50 MiB block (10 MiB left); A1 freed; the 40 MiB optimizer
  // state: free blocks of 12, 10, 30 and 30 MiB, none fits, a new segment: 202 MiB.
  TorchContext ctx = context_of(recorded() + step(1, 8) + step(2, 4));
  r = replay_at(ctx, 1.0);
  CHECK(r.fits());
  CHECK(r.reserved_peak_bytes == 202 * MiB);
  CHECK(r.recorded_reserved_peak_bytes == 112 * MiB);
  CHECK(r.limit_bytes == 512 * MiB);  // measured at the run's OOM, as without the prediction
  CHECK_FALSE(r.truncated_at_recorded_oom);
  REQUIRE(r.completion);
  CHECK(r.completion->predicted_requests == 6);
  CHECK(r.completion->kept_recorded == 1);
  CHECK(r.completion->modules == std::vector<std::string>{"fc1", "fc2"});
  CHECK(r.completion->batches == std::vector<uint64_t>{4, 8});
  CHECK(r.completion->method == "predicted at batch 8");
  CHECK(r.requests == 1 + 1 + 6);  // W, the workspace, the predicted six (A1, A2 among them)
  CHECK(r.predicted_requests_replayed == 6);

  // Half the batch: the step at batch 4 itself. W 40; A1 15 MiB (a 16 MiB segment, 56); the
  // workspace (68), freed; A2 16 (84); 25 MiB (26 MiB segment, 110), freed; the 10 MiB loss
  // temporary from the cached 12 MiB block (2 MiB split off), freed; A2 freed; the gradient
  // (40 MiB: free 12, 16, 26 MiB, a new segment, 150); A1 freed; the state: another, 190 MiB.
  r = replay_at(ctx, 0.5);
  CHECK(r.reserved_peak_bytes == 190 * MiB);
  CHECK(r.completion->method == "predicted at batch 4");
  CHECK(r.scaled_requests == 4);  // A1, A2, the 50 MiB and the loss temporary
  // Twice the batch, extrapolated from batches 4 and 8: A1 60 (100), the workspace (112), A2 60
  // (172), 100 (272), freed; 40 split from it, freed; A2 freed; the gradient split from the
  // cached 60 MiB; A1 freed; the state from the other 60 MiB: 272 MiB.
  r = replay_at(ctx, 2.0);
  CHECK(r.reserved_peak_bytes == 272 * MiB);
  CHECK(r.completion->method == "interpolated from the steps predicted at batches 4 and 8");
  CHECK(r.completion->batch == 16.0);

  // One step only: half the batch scales the sizes that depend on it (the forward's, the loss's;
  // not the gradient or the state): the same sizes, the same 190 MiB.
  TorchContext one = context_of(recorded() + step(1, 8));
  r = replay_at(one, 0.5);
  CHECK(r.reserved_peak_bytes == 190 * MiB);
  CHECK(r.completion->method == "scaled from the step predicted at batch 8");

  // Under pressure PyTorch frees its cache and retries before it fails: under 170 MiB the state's
  // 40 MiB segment (202) does not fit, so the cached whole segments (A1's, A2's, the
  // workspace's: 72 MiB) go back and it does (130): fits, peak 162 MiB. Under 140 MiB fc2's
  // predicted 50 MiB request runs out even with the workspace's segment given back (100 + 50).
  r = replay_at(ctx, 1.0, 170 * MiB);
  CHECK(r.fits());
  CHECK(r.reserved_peak_bytes == 162 * MiB);
  r = replay_at(ctx, 1.0, 140 * MiB);
  REQUIRE(r.oom);
  CHECK(r.oom->requested_bytes == 50 * MiB);
  CHECK(r.oom->phase == "forward");
  CHECK(r.oom->module == "fc2");
  CHECK(r.oom->iteration == -1);  // no iterations known without the hook's marks
  CHECK_FALSE(r.oom->recorded_request);
  CHECK(r.oom->state.reserved_bytes == 100 * MiB);
}

namespace {

// A training step of three modules (realtime 1000 s = monotonic 10 s): the model's forward
// (module net) calls l1, which keeps two 10 MiB activations, l2 two more, l3 one (its output);
// the backward frees them in reverse order; then an optimizer step. Each 10 MiB block takes a
// 10 MiB segment of its own or an exact free one: recorded, 50 MiB reserved at the peak.
std::string three_modules() {
  std::string s =
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "M\t1\tnet\tNet\tm.py\t1\nM\t2\tl1\tLinear\tm.py\t2\nM\t3\tl2\tLinear\tm.py\t3\n"
      "M\t4\tl3\tLinear\tm.py\t4\n";
  auto mark = [](uint64_t ms, int kind, int id) {
    return "K\t" + std::to_string(1000000000000ull + ms * 1000000) + "\t" + std::to_string(kind) +
           "\t" + std::to_string(id) + "\n";
  };
  auto entry = [](const char* action, uint64_t address, uint64_t ms) {
    return std::string("E\t0\t") + action + "\t" + std::to_string(address) + "\t" + mib(10) +
           "\t0\t" + std::to_string(1000000000 + ms * 1000) + "\t\t\n";
  };
  // Marks: 2 forward, 0 module, 1 module end, 4 forward end, 5/6 backward, 7/8 step.
  s += mark(100, 2, 1) + mark(110, 0, 2);
  s += entry("segment_alloc", 1000, 120) + entry("alloc", 1000, 120);
  s += entry("segment_alloc", 2000, 125) + entry("alloc", 2000, 125) + mark(130, 1, 2);
  s += mark(140, 0, 3) + entry("segment_alloc", 3000, 150) + entry("alloc", 3000, 150);
  s += entry("segment_alloc", 4000, 155) + entry("alloc", 4000, 155) + mark(160, 1, 3);
  s += mark(170, 0, 4) + entry("segment_alloc", 5000, 175) + entry("alloc", 5000, 175);
  s += mark(180, 1, 4) + mark(190, 4, 1) + mark(200, 5, 0);
  s += entry("free_completed", 5000, 210) + entry("free_completed", 4000, 220);
  s += entry("free_completed", 3000, 230) + entry("free_completed", 2000, 240);
  s += entry("free_completed", 1000, 250);
  s += mark(260, 6, 0) + mark(270, 7, 1) + mark(280, 8, 1);
  return s + "END\t15\n";
}

WhatIfResult replay_with(const TorchMemory& tm,
                         std::function<std::string(RequestStream&)> transform) {
  WhatIfSettings w;
  w.transform = std::move(transform);
  WhatIfResult r = replay(tm.context(), &tm, 0, {}, 2048 * MiB, w);
  INFO(r.error);
  REQUIRE(r.ok);
  return r;
}

}  // namespace

TEST_CASE("predict: each remedy's transform of the stream, replayed to the byte") {
  const std::string path = write_temp(three_modules());
  TorchTrace t = read_torch_trace(path);
  std::remove(path.c_str());
  REQUIRE(t.problem.empty());
  const TorchMemory tm(t.context);
  REQUIRE(tm.info().size() == 5);
  for (const BlockInfo& b : tm.info()) CHECK(b.category == Category::Activations);
  CHECK(replay_with(tm, nullptr).reserved_peak_bytes == 50 * MiB);

  // bf16 autocast: the five activations take 5 MiB each, large-pool requests below 10 MiB: a
  // 20 MiB segment split four times (the fourth takes its last 5 MiB whole), the fifth a second
  // segment: 40 MiB.
  WhatIfResult r = replay_with(tm, [](RequestStream& s) { return to_bf16_autocast(s, false); });
  CHECK(r.reserved_peak_bytes == 40 * MiB);
  CHECK(replay(tm.context(), &tm, 0, {}, 2048 * MiB,
               {std::nullopt, std::nullopt, std::nullopt, 1.0,
                [](RequestStream& s) { return to_bf16_autocast(s, true); }})
            .error == "the forwards already ran under torch.autocast");

  // Checkpointing l1 and l2: each keeps only its last activation (its output); l1's first is
  // freed when l1 returns, l2's first reuses its segment and is freed when l2 returns, l3's
  // output reuses it again: 30 MiB. In the backward, l2's first is made again just before the
  // backward would have freed it (into a free 10 MiB segment), freed there; l1's likewise: 30.
  const TorchContext& ctx = tm.context();
  r = replay_with(tm, [&ctx](RequestStream& s) {
    return checkpoint_modules(s, ctx, {"l1", "l2"});
  });
  CHECK(r.reserved_peak_bytes == 30 * MiB);
  CHECK(r.requests == 7);  // five made in the forward, two made again in the backward
  CHECK(r.frees == 7);
  WhatIfSettings none;
  none.transform = [&ctx](RequestStream& s) { return checkpoint_modules(s, ctx, {"l9"}); };
  CHECK(replay(ctx, &tm, 0, {}, 2048 * MiB, none).error ==
        "none of the modules named was seen running");

  // Without a kept block (l3's output): 40 MiB.
  r = replay_with(tm, [](RequestStream& s) { return without_blocks(s, {4}); });
  CHECK(r.reserved_peak_bytes == 40 * MiB);
  CHECK(r.requests == 4);
}

TEST_CASE(
    "predict: the hook's V lines: steps run with a remedy's change, told from the completion") {
  // Step 1 completes the unfinished step; step 2 is the same step under bf16 autocast, step 3
  // with fc1 and fc2 checkpointed (their sizes here need not differ: what is read is checked).
  TorchContext ctx = context_of(recorded() + step(1, 8) + step(2, 8) + "V\t2\tbf16_autocast\t-\n" +
                                step(3, 8) + "V\t3\tcheckpoint\t1,2\n");
  REQUIRE(ctx.predicted_steps.size() == 3);
  CHECK(ctx.predicted_steps[0].change.empty());
  CHECK(ctx.predicted_steps[1].change == "bf16_autocast");
  CHECK(ctx.predicted_steps[1].modules.empty());
  CHECK(ctx.predicted_steps[2].change == "checkpoint");
  CHECK(ctx.predicted_steps[2].modules == std::vector<uint32_t>{1, 2});
  CHECK(predicted_change(ctx, 0, "") == &ctx.predicted_steps[0]);
  CHECK(predicted_change(ctx, 0, "bf16_autocast") == &ctx.predicted_steps[1]);
  CHECK(predicted_change(ctx, 0, "checkpoint") == &ctx.predicted_steps[2]);
  CHECK(predicted_change(ctx, 1, "checkpoint") == nullptr);
  // The completion takes the step with no V line only: the same replay as with it alone.
  WhatIfResult r = replay_at(ctx, 1.0);
  CHECK(r.reserved_peak_bytes == 202 * MiB);
  REQUIRE(r.completion);
  CHECK(r.completion->batches == std::vector<uint64_t>{8});
  CHECK(r.completion->predicted_requests == 6);
  // The fake step alone after what the run recorded before it: W, then the six predicted.
  const RequestStream run = recorded_stream(ctx, nullptr, 0);
  const RequestStream fake = fake_step_stream(run, ctx, ctx.predicted_steps[1]);
  CHECK(fake.requests.size() == 1 + 10);
  CHECK(fake.requests[0].bytes == 40 * MiB);
  CHECK(fake.requests[1].predicted);
  CHECK(fake.requests[1].bytes == 30 * MiB);
  // A V line of no step declared: left out, as its requests are.
  TorchContext none = context_of(recorded() + step(1, 8) + "V\t9\tnone\t-\n");
  CHECK(none.predicted_steps[0].change.empty());
  // An unknown change, bad module ids, a second V line for a step: "bad predicted change".
  for (const std::string bad :
       {"V\t1\tfp8\t-\n", "V\t1\tcheckpoint\t1,x\n", "V\t1\tcheckpoint\t-\n",
        "V\t1\tcheckpoint\t0\n", "V\t1\tnone\t-\nV\t1\tnone\t-\n"}) {
    const std::string path = write_temp(recorded() + step(1, 8) + bad + "END\t10\n");
    TorchTrace t = read_torch_trace(path);
    std::remove(path.c_str());
    INFO(bad);
    CHECK(t.problem.rfind("line 2", 0) == 0);
    CHECK(t.problem.find("bad predicted change") != std::string::npos);
  }
}

TEST_CASE("predict: a remedy weighed on the steps the hook ran on fake tensors, to the byte") {
  // The run died in its first step; the hook ran that step on fake tensors as the program runs
  // it (step 1, the completion) and under bf16 autocast (step 2: the activations half as
  // large, the gradient and the optimizer state as they were).
  auto process = [](const std::string& text) {
    auto p = std::make_shared<ProcessModel>();
    p->pid = 42;
    p->devices[0].total_bytes = 2048 * MiB;
    auto tm = std::make_shared<const TorchMemory>(context_of(text));
    p->torch_context = std::shared_ptr<const TorchContext>(tm, &tm->context());
    p->torch_memory = tm;
    return p;
  };
  const auto p = process(recorded() + step(1, 8) + step(2, 4) + "V\t2\tbf16_autocast\t-\n");
  // Each fake step after what the run recorded before it (W, 40 MiB, its own segment),
  // large-pool requests whose segments are rounded to 2 MiB and split when more than 1 MiB is
  // left. Without the change: fc1's and fc2's outputs (30 MiB each) and the 50 MiB request, each
  // a segment; the loss's 20 MiB is split from the freed 50; W's gradient (40) from it again once
  // fc2's output is freed (30 free there is too small); the optimizer's state a segment of its
  // own (fc1's 30 is too small): 40 + 30 + 30 + 50 + 40 = 190 MiB.
  // With it: 15 MiB outputs in 16 MiB segments (1 MiB left is not split off), 25 in 26, the
  // loss's 10 split from it; W's gradient and state (40 each) fit in no free block: 40 + 16 +
  // 16 + 26 + 40 + 40 = 178 MiB.
  const WhatIfResult whole = replay_run(*p, 0, {});
  REQUIRE(whole.ok);
  CHECK(whole.reserved_peak_bytes == 202 * MiB);  // the completed step, as above
  RemedyChange bf16{RemedyKind::MixedPrecision};
  const WhatIfResult r = replay_remedy(*p, 0, bf16);
  INFO(r.error);
  REQUIRE(r.ok);
  REQUIRE(r.fake_step_change);
  CHECK(r.fake_step_change->change == "bf16_autocast");
  CHECK(r.fake_step_change->without_bytes == 190 * MiB);
  CHECK(r.fake_step_change->with_bytes == 178 * MiB);
  // The run's own replay scaled by their ratio: 202 MiB x 178 / 190.
  CHECK(r.reserved_peak_bytes == 198434730);
  CHECK_FALSE(r.over_limit);
  // A change the hook did not run (checkpointing here) is made to the recorded requests instead.
  RemedyChange ckpt{RemedyKind::ActivationCheckpointing, {"fc1"}};
  CHECK_FALSE(replay_remedy(*p, 0, ckpt).fake_step_change);
  CHECK(replay_remedy(*p, 0, ckpt).not_weighed_because.empty());

  // A run whose fake steps the hook gave up (its forked process needed more than 1 % of the
  // run): bf16 is the transform's figure, and says why.
  const std::string why =
      "not weighed on fake steps: they took more than 1 % of the run's 12.0 s (6.1 s when the "
      "run ended; VRAMTRACE_TORCH_PREDICT=always waits for them)";
  const auto q =
      process(recorded() + "N\t0\t1\t8\t8\t1000200000000\t" + why + "\n" + "V\t1\tnone\t-\n");
  const WhatIfResult t = replay_remedy(*q, 0, bf16);
  CHECK_FALSE(t.fake_step_change);
  CHECK(t.not_weighed_because == why);
  // Not said of a remedy that is never weighed on fake steps.
  CHECK(replay_remedy(*q, 0, RemedyChange{RemedyKind::SmallerBatch}).not_weighed_because.empty());
}

TEST_CASE("predict: the run's workspaces put into the fake steps, and again where one recomputes") {
  // A run that finished its step: W (40 MiB) before it; then fc1's output (30), a 36 MiB
  // workspace made and freed by fc1's kernel (no tensor: the fake step does not see it), fc2's
  // output (30, split from the workspace's freed segment), fc1's output freed in the backward,
  // W's gradient (40), fc2's output freed.
  auto e = [](const char* what, int addr, uint64_t mib_, int t) {
    return std::string("E\t0\t") + what + "\t" + std::to_string(addr) + "000000\t" + mib(mib_) +
           "\t0\t" + std::to_string(1000300000 + t) + "\t\t\n";
  };
  const std::string run =
      "vramtrace.torch/2\t42\t1000000000000\t10000000000\t2.11.0\n"
      "M\t1\tfc1\tLinear\tm.py\t1\n"
      "M\t2\tfc2\tLinear\tm.py\t2\n"
      "E\t0\tsegment_alloc\t1000000000\t" +
      mib(40) + "\t0\t1000100000\t\t\n" + "E\t0\talloc\t1000000000\t" + mib(40) +
      "\t0\t1000100000\t\t\n" + e("segment_alloc", 2000, 30, 0) + e("alloc", 2000, 30, 0) +
      e("segment_alloc", 3000, 36, 1) + e("alloc", 3000, 36, 1) + e("free_completed", 3000, 36, 2) +
      e("alloc", 3000, 30, 3) + e("free_completed", 2000, 30, 4) + e("segment_alloc", 4000, 40, 5) +
      e("alloc", 4000, 40, 5) + e("free_completed", 3000, 30, 6);
  // The hook's steps: as the program runs it (1), and with fc1 checkpointed (2): fc1's output
  // freed as fc1 returns and made again in the backward.
  auto r = [](int id, const char* op, int block, uint64_t mib_, int module, char phase) {
    return "R\t" + std::to_string(id) + "\t" + op + "\t" + std::to_string(block) + "\t" +
           mib(mib_) + "\t" + std::to_string(module) + "\t" + phase + "\n";
  };
  const std::string n = "\t8\t8\t1000200000000\tok\n";
  const std::string steps =
      "N\t0\t1" + n + r(1, "a", 1, 30, 1, 'f') + r(1, "a", 2, 30, 2, 'f') +
      r(1, "f", 1, 30, 0, 'b') + r(1, "a", 3, 40, 0, 'b') + r(1, "f", 2, 30, 0, 'b') +
      "V\t1\tnone\t-\n" + "N\t0\t2" + n + r(2, "a", 1, 30, 1, 'f') + r(2, "f", 1, 30, 1, 'f') +
      r(2, "a", 2, 30, 2, 'f') + r(2, "a", 3, 30, 1, 'b') + r(2, "f", 3, 30, 0, 'b') +
      r(2, "a", 4, 40, 0, 'b') + r(2, "f", 2, 30, 0, 'b') + "V\t2\tcheckpoint\t1\n";
  auto p = std::make_shared<ProcessModel>();
  p->pid = 42;
  p->devices[0].total_bytes = 2048 * MiB;
  auto tm = std::make_shared<const TorchMemory>(context_of(run + steps));
  p->torch_context = std::shared_ptr<const TorchContext>(tm, &tm->context());
  p->torch_memory = tm;
  const TorchContext& ctx = *p->torch_context;
  const TorchPredictedStep &none = ctx.predicted_steps[0], &ckpt = ctx.predicted_steps[1];

  // The checkpointed step with the workspace after fc1's output, where the run had it, and a
  // copy of it after fc1's output made again in the backward.
  const RequestStream rec = recorded_stream(ctx, tm.get(), 0);
  REQUIRE(workspaces_placeable(rec, none, ckpt));
  const RequestStream s = fake_step_stream(rec, ctx, ckpt, &none);
  std::vector<std::pair<char, uint64_t>> seen;  // (a)lloc or (f)ree, MiB
  for (const Request& q : s.requests)
    seen.emplace_back(q.op == RequestOp::Malloc ? 'a' : 'f', q.bytes / MiB);
  const std::vector<std::pair<char, uint64_t>> want = {{'a', 40}, {'a', 30}, {'a', 36}, {'f', 36},
                                                       {'f', 30}, {'a', 30}, {'a', 30}, {'a', 36},
                                                       {'f', 36}, {'f', 30}, {'a', 40}, {'f', 30}};
  CHECK(seen == want);
  CHECK(s.requests[7].predicted);  // the copy, a block of its own
  CHECK(s.requests[7].block == s.requests[8].block);
  CHECK(s.requests[7].block != s.requests[2].block);
  CHECK(s.blocks > s.requests[7].block);

  // Replayed (large-pool segments of the requests' sizes, the smallest free block that fits,
  // split when more than 1 MiB is left). The step as the program runs it: W 40, fc1's 30, the
  // workspace 36; fc2's 30 split from its freed segment; W's gradient (40) fits in no free
  // block: 146 MiB, as the run's own. Checkpointed: fc2's output takes fc1's freed 30, fc1's
  // recompute splits the workspace's 36, the workspace again a segment of 36, the gradient one
  // of 40: 182 MiB. The remedy: the run's 146 x 182 / 146.
  const WhatIfResult w =
      replay_remedy(*p, 0, RemedyChange{RemedyKind::ActivationCheckpointing, {"fc1"}});
  INFO(w.error);
  REQUIRE(w.fake_step_change);
  CHECK(w.fake_step_change->without_bytes == 146 * MiB);
  CHECK(w.fake_step_change->with_bytes == 182 * MiB);
  CHECK(w.reserved_peak_bytes == 182 * MiB);

  // A run that does not align with the step (its step's sizes other than the fake ones): no
  // workspace anywhere, and the ratio of the fake steps alone (140 MiB each).
  std::string other = run;
  for (size_t at = other.find(mib(30)); at != std::string::npos; at = other.find(mib(30), at))
    other.replace(at, mib(30).size(), mib(28));
  auto tm2 = std::make_shared<const TorchMemory>(context_of(other + steps));
  const RequestStream rec2 = recorded_stream(tm2->context(), tm2.get(), 0);
  CHECK_FALSE(workspaces_placeable(rec2, tm2->context().predicted_steps[0],
                                   tm2->context().predicted_steps[1]));
}

TEST_CASE("predict: a plan's notes of how its steps ran are read and kept in order") {
  // The hook's Z line, then what it said of the program's own loop (ZN lines).
  const std::string notes =
      "Z\t1000300000000\t8\t2500000000\t1\tprogram\n"
      "ZN\tthe program's own loop ran 3 of 4 steps on fake tensors\n"
      "ZN\tthe step at batch 4: not run by the program's loop: its model was called with batch 8 "
      "where 4 was asked (its batches do not come from a DataLoader)\n"
      "ZN\t5 values the program read from fake tensors (.item(), bool()) were given as 0\n";
  const TorchContext ctx = context_of(recorded() + step(1, 8) + notes);
  REQUIRE(ctx.plan_stop);
  CHECK(ctx.plan_stop->loss == "program");
  REQUIRE(ctx.plan_notes.size() == 3);
  CHECK(ctx.plan_notes[0] == "the program's own loop ran 3 of 4 steps on fake tensors");
  CHECK(ctx.plan_notes[2] ==
        "5 values the program read from fake tensors (.item(), bool()) were given as 0");

  Run run;
  ProcessModel p;
  p.pid = 42;
  p.devices[0].total_bytes = 2048 * MiB;
  auto tm = std::make_shared<const TorchMemory>(TorchContext(ctx));
  p.torch_context = std::shared_ptr<const TorchContext>(tm, &tm->context());
  p.torch_memory = tm;
  run.processes.push_back(p);
  const auto plans = plans_of(run);
  REQUIRE(plans.size() == 1);
  CHECK(plans[0].notes == ctx.plan_notes);
  // The program's own loop ran the steps: no zero_grad assumed.
  for (const auto& u : plans[0].unseen) CHECK(u.find("zero_grad") == std::string::npos);
}

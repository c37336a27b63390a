// The model of a run that goes on (collector/model/live_model.h): fed two processes' traces a few
// frames at a time (their records interleaved in time, one process ending before the other)
// and PyTorch's side channel of one of them (appearing, then rewritten), each moment's report
// is the one model_of() makes of the same files read to the same ends; and only what arrived is
// read, except when a side channel was rewritten or a process appeared.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "collector/analysis/analysis.h"
#include "collector/model/live_model.h"
#include "report/json_report.h"
#include "unit/trace_builder.h"

namespace fs = std::filesystem;
using nlohmann::json;
using vramtrace::collector::LiveModel;
using vramtrace::collector::LiveTrace;
using vt_test::TraceBuilder;

namespace {

constexpr uint64_t MiB = 1ull << 20;

struct TempDir {
  std::string path;
  TempDir() {
    char templ[] = "/tmp/vt-live-model-XXXXXX";
    path = mkdtemp(templ);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A process's stream and the ends of its frames.
struct Stream {
  std::vector<uint8_t> bytes;
  std::vector<size_t> ends;
};

// Allocations, frees, launches and a failed allocation, a frame every `frame` records; every
// record `step` ns after the one before (two streams of different steps interleave).
Stream stream(uint64_t pid, uint64_t step, int frame, int rounds, bool exits) {
  TraceBuilder t(pid);
  t.step(step);
  Stream s;
  int records = 0;
  auto next = [&] {
    if (++records % frame == 0) {
      t.flush();
      s.ends.push_back(t.bytes().size());
    }
  };
  t.context(0, 1024 * MiB).kernel(1, "_Z4stepv").kernel(2, "_Z4lossv");
  next();
  for (int i = 0; i < rounds; ++i) {
    t.alloc(0x100000 * (i + 1), (1 + i % 5) * MiB);
    next();
    t.launch(1 + i % 2);
    next();
    if (i % 3 != 2) {
      t.free(0x100000 * (i + 1));
      next();
    }
    if (i == rounds / 2) {
      t.failed(900 * MiB);
      next();
    }
  }
  if (exits) t.exit_clean();
  s.bytes = t.bytes();
  if (s.ends.empty() || s.ends.back() != s.bytes.size()) s.ends.push_back(s.bytes.size());
  return s;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
}

// PyTorch's trace of process 4242: its allocator's blocks in one segment, at 1.00002 s on
// (epoch 1000 s is monotonic 1 s), the first `entries` of them.
std::string torch_trace(int entries) {
  std::string text = "vramtrace.torch/2\t4242\t1000000000000\t1000000000\t2.11.0\n";
  text += "E\t0\tsegment_alloc\t1048576\t8388608\t0\t1000000020\t\t\n";
  for (int i = 0; i < entries; ++i)
    text += "E\t0\t" + std::string(i % 2 ? "free_completed" : "alloc") + "\t" +
            std::to_string(1048576 + (i / 2) * 4096) + "\t4096\t0\t" +
            std::to_string(1000000030 + i * 7) + "\t\t\n";
  return text + "END\t" + std::to_string(entries + 1) + "\n";
}

json report(const vramtrace::collector::Run& run, const std::vector<std::string>& running) {
  vramtrace::report::RunInfo info;
  info.still_running = running;
  json j = vramtrace::report::to_json(vramtrace::collector::analysis_of(run, running), info);
  j.erase("generated_at");
  return j;
}

}  // namespace

TEST_CASE("a moment of a run that goes on is the report of its traces so far, read on") {
  TempDir dir;
  const std::string a = dir.path + "/vramtrace.4242.vtrace",
                    b = dir.path + "/vramtrace.4343.vtrace";
  const std::string torch = dir.path + "/vramtrace.4242.torch";
  const Stream sa = stream(4242, 1000, 3, 40, false), sb = stream(4343, 1300, 2, 30, true);
  LiveModel model;
  int started_over = 0;
  uint64_t last_events = 0, last_copied = 0, waited = 0;
  // Each moment, process 4242's trace has one more frame and 4343's two more; 4343 ends (its
  // trace closed) once whole. The side channel appears at moment 5, is rewritten at moment 12.
  for (size_t k = 0; k < sa.ends.size(); ++k) {
    const size_t ka = k, kb = std::min(2 * k + 1, sb.ends.size() - 1);
    write(a, sa.bytes, sa.ends[ka]);
    write(b, sb.bytes, sb.ends[kb]);
    std::vector<std::string> side;
    if (k == 5 || k == 12) {
      std::ofstream(torch + ".tmp") << torch_trace(k == 5 ? 6 : 14);
      fs::rename(torch + ".tmp", torch);
    }
    if (k >= 5) side.push_back(torch);
    const bool b_open = kb + 1 < sb.ends.size();
    std::vector<LiveTrace> traces{{a, sa.ends[ka], true}, {b, sb.ends[kb], b_open}};
    std::vector<std::string> running{a};
    if (b_open) running.push_back(b);

    const auto moment = model.moment(traces, side);
    std::vector<std::unique_ptr<vramtrace::collector::TraceReader>> readers;
    for (const auto& t : traces)
      readers.push_back(std::make_unique<vramtrace::collector::TraceReader>(t.path, t.end));
    const auto whole = vramtrace::collector::model_of(std::move(readers), side);
    const json got = report(moment, running), want = report(whole, running);
    INFO("moment " << k);
    REQUIRE(got.dump(1) == want.dump(1));
    started_over += model.last_cost().started_over;
    // Only what arrived is read: the records of the files' new frames, and those the last
    // moment applied to its copy alone (another process's next record might have come first),
    // less those left to this moment's copy.
    uint64_t events = 0;
    for (const auto& p : whole.processes) events += p.events;
    if (!model.last_cost().started_over)
      REQUIRE(model.last_cost().applied ==
              events - last_events + last_copied - model.last_cost().applied_to_copy);
    last_events = events;
    last_copied = model.last_cost().applied_to_copy;
    waited = std::max(waited, last_copied);
  }
  REQUIRE(waited > 0);  // the merge did wait for a process that went on
  // Read again whole only at the first moment and when the side channel came and changed.
  REQUIRE(started_over == 3);
  model.moment({{a, sa.ends.back(), false}, {b, sb.ends.back(), false}}, {torch});
  REQUIRE_FALSE(model.last_cost().started_over);
  REQUIRE(model.last_cost().applied_to_copy == 0);  // both ended: nothing is left waiting
}

TEST_CASE("a moment where a process appears, or a trace that was taken as ended grows") {
  TempDir dir;
  const std::string a = dir.path + "/vramtrace.4242.vtrace",
                    b = dir.path + "/vramtrace.4343.vtrace";
  const Stream sa = stream(4242, 1000, 3, 10, false), sb = stream(4343, 1300, 2, 10, true);
  LiveModel model;
  write(a, sa.bytes, sa.ends[3]);
  model.moment({{a, sa.ends[3], true}}, {});
  REQUIRE(model.last_cost().started_over);
  write(a, sa.bytes, sa.ends[5]);
  model.moment({{a, sa.ends[5], true}}, {});
  REQUIRE_FALSE(model.last_cost().started_over);
  // A second process: every trace is read again (the processes' order is the report's).
  write(b, sb.bytes, sb.ends[2]);
  auto run = model.moment({{a, sa.ends[5], true}, {b, sb.ends[2], false}}, {});
  REQUIRE(model.last_cost().started_over);
  REQUIRE(run.processes.size() == 2);
  // 4343 was taken as ended and read to its end: when more of it comes, read again whole.
  write(b, sb.bytes, sb.ends[4]);
  run = model.moment({{a, sa.ends[5], true}, {b, sb.ends[4], false}}, {});
  REQUIRE(model.last_cost().started_over);
  std::vector<std::unique_ptr<vramtrace::collector::TraceReader>> readers;
  readers.push_back(std::make_unique<vramtrace::collector::TraceReader>(a, sa.ends[5]));
  readers.push_back(std::make_unique<vramtrace::collector::TraceReader>(b, sb.ends[4]));
  REQUIRE(report(run, {a}).dump() ==
          report(vramtrace::collector::model_of(std::move(readers)), {a}).dump());
}

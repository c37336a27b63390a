// End-to-end tests of what PyTorch's memory is: the start-up hook's module, autograd and
// optimizer records on the stand-in PyTorch (tests/programs/fake_torch) running
// py_torch_train.py, and the report's categories, named tensors, phases, iterations, the OOM's
// moment and the diagnosis with its remedies, in exact bytes (the program's docstring derives
// them: 1 MiB weights, grads and momentum buffers, a 20 MiB batch and a 20 MiB fc1 output
// live at the OOM, 24 MiB cached of the 70 MiB reserved); and py_torch_graph.py's CUDA graphs
// and MemPool, whose private pools are one category, segments whole.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "e2e/e2e_util.h"

using nlohmann::json;

namespace {

const std::string kTrain = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_train.py";

std::string torch_env() { return fake_torch_env(); }

// `vramtrace run` of py_torch_train.py with `args`; the run exits as the program did.
json run_train(const std::string& args, const std::string& dir, int code, std::string* out,
               const std::string& env = "") {
  Result r = sh(kEnv + torch_env() + " " + env + " " + kVramtrace + " run -o " + dir +
                " -- python3 " + kTrain + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == code);
  *out = r.out;
  return load_json(dir + "/report.json");
}

uint64_t sum(const json& categories) {
  uint64_t s = 0;
  for (const auto& [k, v] : categories.items()) s += v.get<uint64_t>();
  return s;
}

// The process's memory at the fatal OOM and at the peak, the same moment's blocks: the
// weights, their grads and momentum buffers (1 MiB each), the batch (20 MiB, made outside
// the forward), fc1's output (20 MiB, kept by the forward that died), and the allocator's
// 24 MiB free in its segments (70 MiB reserved). fc1's and fc2's scratch were freed.
void check_state(const json& c) {
  REQUIRE(c["parameters"] == 2 * MiB);
  REQUIRE(c["gradients"] == 2 * MiB);
  REQUIRE(c["optimizer_state"] == 2 * MiB);
  REQUIRE(c["activations"] == 20 * MiB);
  REQUIRE(c["temporaries"] == 0);
  REQUIRE(c["inputs"] == 20 * MiB);
  REQUIRE(c["allocator_cache"] == 24 * MiB);
  REQUIRE(c["outside_pytorch"] == 0);
  REQUIRE(c["workspaces"] == 0);
  REQUIRE(c["communication"] == 0);
  REQUIRE(c["private_pool"] == 0);
  REQUIRE(c["unclassified"] == 0);
  REQUIRE(sum(c) == 70 * MiB);
}

// The OOM's moment, from the hook's marks and the exception that ended the program.
void check_oom_moment(const json& o) {
  REQUIRE(o["fatal"] == true);
  REQUIRE(o["phase"] == "forward");
  REQUIRE(o["module"] == "fc2");
  REQUIRE(o["iteration"] == 3);
  // The user's innermost line of the exception: fc2's forward asking for its output.
  REQUIRE(o["python_site"] == kTrain + ":46");
  REQUIRE(o["python_function"] == "forward");
  REQUIRE(o["exception"]["type"] == "torch.OutOfMemoryError");
  REQUIRE(o["exception"]["message"] == "CUDA out of memory. Tried to allocate 20971520 bytes");
  REQUIRE(o["live_bytes"] == 70 * MiB);
  check_state(o["categories"]);
  REQUIRE(sum(o["categories"]) == o["live_bytes"].get<uint64_t>());
}

}  // namespace

TEST_CASE("PyTorch's memory by category: a training loop that dies of an OOM in fc2's forward") {
  std::string dir = temp_dir(), out;
  json j = run_train("", dir, 1, &out);
  REQUIRE(contains(out, "iteration 2 done"));
  REQUIRE(contains(out, "torch.OutOfMemoryError: CUDA out of memory"));
  // The traceback reads as without vramtrace: no frame of the hook's wrappers in it.
  REQUIRE_FALSE(contains(out, "sitecustomize.py"));
  REQUIRE(j["run"]["problems"].empty());
  const json& p = j["processes"][0];
  REQUIRE(p["torch_allocator_trace"]["merged"] == true);
  REQUIRE_FALSE(p["torch_allocator_trace"].contains("problem"));

  // Iterations from the optimizer's steps: three done, the fourth begun (its forward ran).
  REQUIRE(p["iterations"]["source"] == "optimizer.step()");
  REQUIRE(p["iterations"]["count"] == 4);

  // One OOM: the driver's failed cuMemAlloc of fc2's 20 MiB segment, PyTorch's own.
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE(o["api"] == "cuMemAlloc");
  REQUIRE(o["requested_bytes"] == 20 * MiB);
  REQUIRE(o["allocator"]["requested_bytes"] == 20 * MiB);
  check_oom_moment(o);
  REQUIRE_FALSE(o.contains("limit"));  // the device's own capacity

  // The device's peak (70 MiB reserved, fc1's output's segment in iteration 3). The categories
  // "at the peak" are read at PyTorch's in-use peak (56 MiB in blocks), when fc1's 10 MiB
  // scratch was still held: the allocator's cache then was 14 MiB, not the OOM's 24. At exit
  // the program had freed nothing more than at the OOM.
  const json& d = p["devices"][0];
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 70 * MiB);
  const json& at_peak = d["categories"]["at_peak"];
  REQUIRE(d["categories"]["at_peak_moment"]["what"] == "PyTorch's in-use peak");
  REQUIRE(d["categories"]["at_peak_moment"]["kind"] == "allocator_in_use_peak");
  REQUIRE(d["categories"]["at_peak_moment"]["bytes"] == 70 * MiB);
  REQUIRE(at_peak["parameters"] == 2 * MiB);
  REQUIRE(at_peak["gradients"] == 2 * MiB);
  REQUIRE(at_peak["optimizer_state"] == 2 * MiB);
  REQUIRE(at_peak["activations"] == 20 * MiB);
  REQUIRE(at_peak["temporaries"] == 10 * MiB);
  REQUIRE(at_peak["inputs"] == 20 * MiB);
  REQUIRE(at_peak["allocator_cache"] == 14 * MiB);
  REQUIRE(sum(at_peak) == j["devices"][0]["peak"]["bytes"].get<uint64_t>());
  REQUIRE(j["devices"][0]["categories"] == d["categories"]);  // one process: the device's own
  check_state(d["categories"]["at_exit"]);
  // Over time: a row at each extreme of the driver's timeline and of the blocks in use, in
  // time order. At the driver's extremes a row adds up to the device's figure then; the last
  // row is the exit's; the blocks' highest (the peak's 56 MiB: the 6 MiB of weights, grads and
  // momentum, the batch, fc1's output and fc2's scratch) is a row, though the driver's figure
  // did not move then.
  const json& points = d["categories"]["timeline"]["points"];
  const json& columns = d["categories"]["timeline"]["columns"];
  REQUIRE(points.size() >= 2);
  const json& dev_points = d["timeline"]["points"];
  REQUIRE(d["timeline"]["columns"] ==
          json::parse(
              R"(["time_ns","max_bytes","last_bytes","min_bytes","max_time_ns","min_time_ns"])"));
  std::map<uint64_t, uint64_t> sum_at;
  uint64_t blocks_max = 0, last_sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    uint64_t s = 0, blocks = 0;
    for (size_t k = 1; k < points[i].size(); ++k) {
      s += points[i][k].get<uint64_t>();
      if (columns[k] != "allocator_cache" && columns[k] != "outside_pytorch")
        blocks += points[i][k].get<uint64_t>();
      // Every byte here is PyTorch's: a segment the driver has just made, read before the
      // allocator recorded it, is not memory outside PyTorch at any moment.
      if (columns[k] == "outside_pytorch") REQUIRE(points[i][k] == 0);
    }
    if (i) REQUIRE(points[i][0].get<uint64_t>() > points[i - 1][0].get<uint64_t>());
    sum_at[points[i][0].get<uint64_t>()] = s;
    blocks_max = std::max(blocks_max, blocks);
    last_sum = s;
  }
  for (const json& p : dev_points) {
    INFO("device point at " << p[0]);
    REQUIRE(sum_at.at(p[4].get<uint64_t>()) == p[1].get<uint64_t>());
    REQUIRE(sum_at.at(p[5].get<uint64_t>()) == p[3].get<uint64_t>());
  }
  REQUIRE(last_sum == dev_points.back()[2].get<uint64_t>());
  REQUIRE(blocks_max == 56 * MiB);

  // Activations and temporaries at the in-use peak by module: fc1's output, and the scratch
  // fc2's forward held then; each with its class, its forward's line and the line that ran it
  // (report.html expands a module to them).
  const std::string train = kTrain;
  json by_module = json::array();
  for (auto [name, bytes, cat] :
       {std::tuple{"fc1", 20 * MiB, "activations"}, std::tuple{"fc2", 10 * MiB, "temporaries"}})
    by_module.push_back(
        {{"module", name},
         {"bytes", bytes},
         {"count", 1},
         {"type", "Linear"},
         {"forward_at", train + ":43"},
         {"categories", {{cat, bytes}}},
         {"sites", {{{"site", "main (" + train + ":70)"}, {"bytes", bytes}, {"count", 1}}}}});
  REQUIRE(d["peak"]["by_module"] == by_module);
  REQUIRE(d["peak"]["by_top_module"] ==
          json::parse(R"([{"module":"fc1","bytes":20971520},{"module":"fc2","bytes":10485760}])"));

  // Named tensors live at the peak: both weights, their grads and momentum buffers.
  REQUIRE(d["peak"]["named_tensors"] == 6);
  std::set<std::string> names;
  for (const json& t : d["peak"]["tensors"]) {
    REQUIRE(t["bytes"] == 1 * MiB);
    REQUIRE(t["shape"] == "512x512");
    REQUIRE(t["dtype"] == "float32");
    const std::string name = t["name"];
    const std::string kind = t["kind"];
    names.insert(name);
    if (kind == "param") {
      REQUIRE(t["category"] == "parameters");
    } else if (kind == "grad") {
      REQUIRE(t["category"] == "gradients");
      REQUIRE(name.size() > 5);
      REQUIRE(name.compare(name.size() - 5, 5, ".grad") == 0);
    } else {
      REQUIRE(kind == "state");
      REQUIRE(t["category"] == "optimizer_state");
    }
  }
  REQUIRE(names == std::set<std::string>{"fc1.weight", "fc2.weight", "fc1.weight.grad",
                                         "fc2.weight.grad", "fc1.weight.momentum_buffer",
                                         "fc2.weight.momentum_buffer"});

  // Phases: forward, backward and step of iterations 0-2 at their lines, then the forward
  // that died (ended by the exception).
  const json& phases = d["phases"];
  REQUIRE(phases.size() == 10);
  const char* kinds[] = {"forward", "backward", "optimizer"};
  const char* lines[] = {":70", ":77", ":78"};
  for (size_t i = 0; i < 10; ++i) {
    INFO("phase " << i);
    REQUIRE(phases[i]["phase"] == kinds[i % 3]);
    REQUIRE(phases[i]["iteration"] == static_cast<int64_t>(i / 3));
    REQUIRE(phases[i]["site"] == kTrain + lines[i % 3]);
    REQUIRE(phases[i].contains("end_ns"));
    REQUIRE(phases[i]["end_ns"].get<uint64_t>() >= phases[i]["start_ns"].get<uint64_t>());
    if (i)
      REQUIRE(phases[i]["start_ns"].get<uint64_t>() >= phases[i - 1]["end_ns"].get<uint64_t>());
  }

  // Module hooks ran in the first three iterations only: the fourth forward's mark says its
  // module calls were not traced (bit 30), so fc1 and fc2 above (at the peak, and the OOM's
  // module) came from the traced iterations and the Python stack at the OOM.
  Result forwards =
      sh("awk -F'\t' '$1 == \"K\" && $3 == 2 {print $4}' " + dir + "/vramtrace.*.torch");
  REQUIRE(forwards.out == "1\n1\n1\n1073741825\n");

  // Died of it: what was live then is no leak. Its 8 blocks, each named by what it is.
  REQUIRE(j["leaks"].empty());
  std::map<std::string, uint64_t> dead;
  for (const json& g : j["live_at_death"]) {
    REQUIRE(g["count"] == 1);
    dead[g["site"]] = g["bytes"];
  }
  REQUIRE(dead ==
          std::map<std::string, uint64_t>{
              {"fc1 (Linear) at " + kTrain + ":70", 20 * MiB},
              {"moved to the GPU at " + kTrain + ":68", 20 * MiB},
              {"parameter fc1.weight at " + kTrain + ":41", 1 * MiB},
              {"parameter fc2.weight at " + kTrain + ":41", 1 * MiB},
              {"gradient fc1.weight.grad at " + kTrain + ":77", 1 * MiB},
              {"gradient fc2.weight.grad at " + kTrain + ":77", 1 * MiB},
              {"optimizer state fc1.weight.momentum_buffer at " + kTrain + ":78", 1 * MiB},
              {"optimizer state fc2.weight.momentum_buffer at " + kTrain + ":78", 1 * MiB}});

  // The diagnosis: the fatal OOM against the card's 80 MiB, 70 held and 20 more asked.
  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "oom");
  REQUIRE(dg["fatal_ooms"] == 1);
  REQUIRE(dg["recovered_ooms"] == 0);
  REQUIRE(dg["limit"]["kind"] == "device");
  REQUIRE(dg["limit"]["bytes"] == 80 * MiB);
  REQUIRE(dg["held_bytes"] == 70 * MiB);
  REQUIRE(dg["requested_bytes"] == 20 * MiB);
  REQUIRE(dg["headroom_bytes"] == 10 * MiB);
  check_state(dg["categories"]);
  // Remedies replayed through the model of PyTorch's caching allocator (what tests/e2e/
  // whatif_test.cpp derives: the run's own requests need 76 MiB), largest saving first, each
  // figure the replay's; the run died at its OOM, so each holds as far as it got: a floor.
  const json& rs = dg["remedies"];
  std::vector<std::string> kinds_got;
  for (const json& r : rs) kinds_got.push_back(r["kind"]);
  REQUIRE(kinds_got == std::vector<std::string>{"smaller_batch", "mixed_precision",
                                                "expandable_segments", "leaner_optimizer"});
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(rs[i]["predicted_peak_bytes"].get<uint64_t>() ==
            76 * MiB - rs[i]["saves_bytes"].get<uint64_t>());
    REQUIRE(rs[i]["predicted_peak_is_lower_bound"] == true);
    REQUIRE(rs[i]["replayed"]["verdict"] == "fits");
    REQUIRE(rs[i]["replayed"]["up_to_recorded_oom"] == true);
  }
  // The allocator's free 24 MiB was there, in pieces smaller than the request.
  REQUIRE(dg["cause"]["kind"] == "fragmentation");
  // Expandable segments: 20 MiB pages; iteration 3 maps two more for fc1's scratch and output
  // and a third for fc2's scratch, where fc2's output then fits: 66 MiB.
  REQUIRE(remedy(rs, "expandable_segments")["predicted_peak_bytes"] == 66 * MiB);
  // Half the batch: 48 MiB (whatif --scale-batch 0.5).
  REQUIRE(remedy(rs, "smaller_batch")["predicted_peak_bytes"] == 48 * MiB);
  REQUIRE(remedy(rs, "smaller_batch")["how"] ==
          "this batch fits; replayed, up to 1.20x of it would (as far as the run got)");
  // bf16: the scratches (1 MiB: the small pool) and outputs halved, the failed 20 MiB output
  // too: iteration 3's fc1 scratch and output share a new 20 MiB segment (48 MiB), where fc2's
  // scratch and its 10 MiB output fit.
  REQUIRE(remedy(rs, "mixed_precision")["predicted_peak_bytes"] == 48 * MiB);
  // Another optimizer's requests were never recorded: said, no figure.
  REQUIRE(remedy(rs, "leaner_optimizer")["not_replayed_because"] ==
          "another optimizer's requests (its state's layout, its step's temporaries) were not "
          "recorded");
  REQUIRE_FALSE(remedy(rs, "leaner_optimizer").contains("predicted_peak_bytes"));
  // Not offered: checkpointing (fc1's output is the only module's), no_grad (no evaluation),
  // offload (the model state is far below the limit).
}

TEST_CASE("PyTorch's memory by category: the per-process memory fraction is the limit") {
  // 0.875 of 80 MiB: PyTorch refuses fc2's 20 MiB segment itself at 70 MiB reserved; the
  // driver is never asked, the moment is the same.
  std::string dir = temp_dir(), out;
  json j = run_train("--fraction 0.875", dir, 1, &out);
  REQUIRE(contains(out, "torch.OutOfMemoryError: CUDA out of memory"));
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE(o["requested_bytes"] == 20 * MiB);
  check_oom_moment(o);
  REQUIRE(o["limit"]["kind"] == "per_process_fraction");
  REQUIRE(o["limit"]["bytes"] == 70 * MiB);

  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "oom");
  REQUIRE(dg["limit"]["kind"] == "per_process_fraction");
  REQUIRE(dg["limit"]["bytes"] == 70 * MiB);
  REQUIRE(dg["limit"]["title"] ==
          "PyTorch's per-process memory fraction (0.875 of 0.08 GiB: 0.07 GiB)");
  REQUIRE(dg["held_bytes"] == 70 * MiB);
  REQUIRE(dg["headroom_bytes"] == 0);
  check_state(dg["categories"]);
  // Under the 70 MiB fraction the run's own 76 MiB do not fit: the replay's largest batch is
  // just below this one (the cache given back and retried first).
  REQUIRE(remedy(dg["remedies"], "smaller_batch")["saves_bytes"] == 28 * MiB);
  REQUIRE(remedy(dg["remedies"], "smaller_batch")["how"] ==
          "the largest batch that fits the limit, replayed, is 99% of this one (as far as the "
          "run got)");
  REQUIRE(remedy(dg["remedies"], "smaller_batch")["replayed"]["limit_bytes"] == 70 * MiB);
  REQUIRE(remedy(dg["remedies"], "mixed_precision")["saves_bytes"] == 28 * MiB);
}

TEST_CASE("PyTorch's memory by category: a run longer than PyTorch's trace ring") {
  // A ring of 12 entries holds only iteration 3 of the 70 the run makes: the weights, grads and
  // momentum buffers were made before it. What was live then comes from the allocator's state
  // at the OOM (its segments, the blocks in use) and the hook's names: the moment reads as it
  // does with the whole trace.
  std::string dir = temp_dir(), out;
  json j = run_train("", dir, 1, &out, "VRAMTRACE_TORCH_MAX_ENTRIES=12");
  REQUIRE(contains(out, "torch.OutOfMemoryError: CUDA out of memory"));
  REQUIRE(j["oom"].size() == 1);
  check_oom_moment(j["oom"][0]);
  check_state(j["diagnosis"]["categories"]);
  std::map<std::string, uint64_t> dead;
  for (const json& g : j["live_at_death"]) dead[g["site"]] += g["bytes"].get<uint64_t>();
  // Made before the window: their frames, and which block came first in each segment, left
  // the ring with its earliest entries; no line.
  REQUIRE(dead.at("parameter fc1.weight") == 1 * MiB);
  REQUIRE(dead.at("optimizer state fc2.weight.momentum_buffer") == 1 * MiB);
  REQUIRE(dead.at("gradient fc2.weight.grad") == 1 * MiB);
  uint64_t total = 0;
  for (const auto& [site, bytes] : dead) total += bytes;
  REQUIRE(total == 46 * MiB);
  const json& problems = j["run"]["problems"];
  REQUIRE(problems.size() == 1);
  REQUIRE(contains(problems[0].get<std::string>(),
                   "PyTorch's trace buffer of device 0 was full (12 entries)"));
  const json& cat = j["processes"][0]["devices"][0]["categories"];
  REQUIRE(contains(cat["note"].get<std::string>(),
                   " PyTorch's trace held only the latest entries (VRAMTRACE_TORCH_MAX_ENTRIES "
                   "raises their number): the blocks made before them are unclassified unless "
                   "named (parameters, gradients, optimizer state), and the categories over time "
                   "begin with them."));
  // The categories over time begin with the ring's window (PyTorch's side before it is not
  // known): later than the run's first driver allocation.
  REQUIRE(cat["timeline"]["points"][0][0].get<uint64_t>() >
          j["processes"][0]["devices"][0]["timeline"]["points"][0][4].get<uint64_t>());
}

TEST_CASE("PyTorch's memory by category: an OOM caught in a forward, the loop goes on") {
  std::string dir = temp_dir(), out;
  json j = run_train("--recover", dir, 0, &out);
  REQUIRE(contains(out, "iteration 3 out of memory, going on"));
  REQUIRE(contains(out, "iteration 4 done"));
  const json& p = j["processes"][0];
  // The retry is the same iteration for the optimizer: four steps, four iterations.
  REQUIRE(p["iterations"]["source"] == "optimizer.step()");
  REQUIRE(p["iterations"]["count"] == 4);
  REQUIRE(j["oom"].size() == 1);
  const json& o = j["oom"][0];
  REQUIRE_FALSE(o.contains("fatal"));
  REQUIRE(o["phase"] == "forward");
  REQUIRE(o["module"] == "fc2");
  REQUIRE(o["iteration"] == 3);
  REQUIRE(o["python_site"] == kTrain + ":70");  // the forward's call: no exception at exit
  check_state(o["categories"]);
  // The forward that raised ended there, and the retry is a forward of its own, with its
  // backward and step: five forwards in all.
  const json& phases = p["devices"][0]["phases"];
  REQUIRE(phases.size() == 13);
  std::vector<std::string> got;
  for (const json& ph : phases) got.push_back(ph["phase"]);
  REQUIRE(got == std::vector<std::string>{"forward", "backward", "optimizer", "forward", "backward",
                                          "optimizer", "forward", "backward", "optimizer",
                                          "forward", "forward", "backward", "optimizer"});
  for (size_t i = 9; i < 13; ++i) {
    INFO("phase " << i);
    REQUIRE(phases[i]["iteration"] == 3);
    REQUIRE(phases[i].contains("end_ns"));
  }
  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "peak");
  REQUIRE(dg["fatal_ooms"] == 0);
  REQUIRE(dg["recovered_ooms"] == 1);
  // main() returned: the model, its grads and the optimizer's state went with it, as they
  // do without vramtrace; nothing was in use at exit.
  REQUIRE(j["leaks"].empty());
  REQUIRE(j["live_at_death"].empty());
  const json& c = p["devices"][0]["categories"]["at_exit"];
  REQUIRE(c["allocator_cache"] == 70 * MiB);
  REQUIRE(sum(c) == 70 * MiB);
}

TEST_CASE("PyTorch's memory by category: an OOM caught in a forward, on PyTorch 2.0") {
  // No always_call: the modules that raised stay on the hook's stack until the model is
  // called again, which drops them; the retry is still a forward of its own.
  std::string dir = temp_dir(), out;
  // Module hooks in every iteration: the one that raised is traced too.
  json j =
      run_train("--recover", dir, 0, &out, "FAKE_TORCH_VERSION=2.0 VRAMTRACE_TORCH_MODULES=every");
  REQUIRE(contains(out, "iteration 4 done"));
  const json& o = j["oom"][0];
  REQUIRE(j["oom"].size() == 1);
  REQUIRE_FALSE(o.contains("fatal"));
  REQUIRE(o["phase"] == "forward");
  REQUIRE(o["module"] == "fc2");
  REQUIRE(o["iteration"] == 3);
  const json& phases = j["processes"][0]["devices"][0]["phases"];
  std::vector<std::string> got;
  for (const json& ph : phases) got.push_back(ph["phase"]);
  REQUIRE(got == std::vector<std::string>{"forward", "backward", "optimizer", "forward", "backward",
                                          "optimizer", "forward", "backward", "optimizer",
                                          "forward", "forward", "backward", "optimizer"});
  REQUIRE_FALSE(phases[9].contains("end_ns"));  // the forward that raised: no end seen
  for (size_t i = 10; i < 13; ++i) {
    INFO("phase " << i);
    REQUIRE(phases[i]["iteration"] == 3);
    REQUIRE(phases[i]["site"] == kTrain + (i == 10 ? ":70" : i == 11 ? ":77" : ":78"));
    REQUIRE(phases[i].contains("end_ns"));
  }
  REQUIRE(j["leaks"].empty());
}

TEST_CASE("PyTorch's memory by category: CUDA graphs' and a MemPool's private pools") {
  // py_torch_graph.py's docstring derives the figures: at exit the weight (1 MiB), the static
  // input (4 MiB), 1 MiB free in the weight's segment, and three private pools: graph 1's own
  // (id (1, 0): its scratch's 2 MiB segment, free, and its output's 4 MiB), the MemPool's
  // (id (0, 1): 512 KiB held in 2 MiB) and graph 2's shared one (id (0, 2), like graph 1's).
  std::string dir = temp_dir();
  const std::string script = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_graph.py";
  Result r = sh(kEnv + torch_env() + " " + kVramtrace + " run -o " + dir + " -- python3 " + script);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "py_torch_graph done, replays 3"));
  REQUIRE(contains(r.out, "CUDA-graph / private pools 14.00 MiB"));
  json j = load_json(dir + "/report.json");
  REQUIRE(j["run"]["problems"].empty());
  const json& p = j["processes"][0];
  REQUIRE(p["torch_allocator_trace"]["merged"] == true);
  const json& c = p["devices"][0]["categories"];
  const json& e = c["at_exit"];
  REQUIRE(e["private_pool"] == 14 * MiB);  // the blocks' 8.5 MiB and the 5.5 MiB free in them
  REQUIRE(e["parameters"] == 1 * MiB);
  REQUIRE(e["inputs"] == 4 * MiB);
  REQUIRE(e["allocator_cache"] == 1 * MiB);  // the default pool's only
  for (const char* k : {"gradients", "optimizer_state", "activations", "temporaries", "workspaces",
                        "communication", "outside_pytorch", "unclassified"}) {
    INFO(k);
    REQUIRE(e[k] == 0);
  }
  REQUIRE(sum(e) == 20 * MiB);
  REQUIRE(j["devices"][0]["peak"]["bytes"] == 20 * MiB);
  REQUIRE(c["at_peak"] == e);  // the last segment made the peak; nothing changed after it
  // The static input and the MemPool's buffer are made outside forward, backward and step by
  // factories (no call the hook marks), each in a segment of its own: the driver call's line.
  std::map<std::string, uint64_t> still_held;
  for (const json& g : j["leaks"]) still_held[g["site"]] += g["bytes"].get<uint64_t>();
  // The graphs' outputs, in their private pools, are the graphs' own (held for the next
  // replay): not leak suspects. The MemPool's buffer is the program's.
  REQUIRE(still_held == std::map<std::string, uint64_t>{
                            {"outside forward, backward and step at " + script + ":32", 4 * MiB},
                            {"outside forward, backward and step at " + script + ":40", MiB / 2}});
  REQUIRE(p["devices"][0]["cuda_graph_blocks_at_exit_bytes"] == 8 * MiB);
  REQUIRE(c["titles"]["private_pool"] == "CUDA-graph / private pools");
  REQUIRE(c["private_pools"] == json::parse(R"([
      {"pool_id": [1, 0], "cuda_graph": true, "segments": 2, "bytes": 6291456, "in_use_bytes": 4194304},
      {"pool_id": [0, 1], "cuda_graph": false, "segments": 1, "bytes": 2097152, "in_use_bytes": 524288},
      {"pool_id": [0, 2], "cuda_graph": true, "segments": 2, "bytes": 6291456, "in_use_bytes": 4194304}])"));
  // Over time: each pool segment counts whole from the moment the allocator made it.
  const json& columns = c["timeline"]["columns"];
  size_t col = 0;
  for (size_t k = 0; k < columns.size(); ++k)
    if (columns[k] == "private_pool") col = k;
  REQUIRE(col > 0);
  std::vector<uint64_t> steps;
  for (const json& row : c["timeline"]["points"]) {
    const uint64_t v = row[col].get<uint64_t>();
    if (steps.empty() || steps.back() != v) steps.push_back(v);
  }
  REQUIRE(steps == std::vector<uint64_t>{0, 2 * MiB, 6 * MiB, 8 * MiB, 10 * MiB, 14 * MiB});
}

// `vramtrace run` of py_torch_lines.py: its leak suspects (site -> count) and its trace's
// alloc entries, each "frames" or "-" (whether PyTorch recorded Python frames for it).
struct LinesRun {
  std::map<std::string, uint64_t> leaks;
  std::string allocs;
};

LinesRun run_lines(const std::string& env, const std::string& args = "") {
  const std::string script = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_lines.py";
  std::string dir = temp_dir();
  Result r = sh(kEnv + torch_env() + " " + env + " " + kVramtrace + " run -o " + dir +
                " -- python3 " + script + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "py_torch_lines done 6"));
  json j = load_json(dir + "/report.json");
  LinesRun out;
  for (const json& g : j["leaks"]) {
    REQUIRE(g["bytes"] == 256 * g["count"].get<uint64_t>());
    out.leaks[g["site"]] += g["count"].get<uint64_t>();
  }
  out.allocs =
      sh("awk -F'\t' '$1 == \"E\" && $3 == \"alloc\" {printf \"%s \", $8 == \"\" ? \"-\" : "
         "\"frames\"}' " +
         dir + "/vramtrace.*.torch")
          .out;
  return out;
}

TEST_CASE("PyTorch's memory by category: the line of a block made between the phases") {
  // py_torch_lines.py's targets: 256 bytes from a factory between the phases, in the weight's
  // segment (made before them). The hook switches the allocator trace's frames on between
  // forward, backward and step, off inside them: each iteration's batch (a move) and targets
  // have frames, the forward's output and the first backward's gradient not. The allocs: the
  // weight, then per iteration the batch, the targets and the output (and the gradient, once).
  const std::string line = "outside forward, backward and step at " + std::string(VT_SOURCE_DIR) +
                           "/tests/programs/py_torch_lines.py:42";
  // A budget no iteration exceeds: all six have the line.
  LinesRun all = run_lines("VRAMTRACE_TORCH_LINES=1");
  REQUIRE(all.leaks == std::map<std::string, uint64_t>{{line, 6}});
  const std::string iteration = "frames frames - ";
  std::string expected = "frames " + iteration + "- ";
  for (int i = 1; i < 6; ++i) expected += iteration;
  REQUIRE(all.allocs == expected);
  // No budget: the first counted iteration (the second) is over it, the frames stay off after
  // it; the other four are outside the phases with no line (their segment was not theirs).
  LinesRun cut = run_lines("VRAMTRACE_TORCH_LINES=0");
  REQUIRE(cut.leaks ==
          std::map<std::string, uint64_t>{{line, 2}, {"outside forward, backward and step", 4}});
  REQUIRE(cut.allocs == "frames " + iteration + "- " + iteration + "- - - - - - - - - - - - ");
  LinesRun off = run_lines("VRAMTRACE_TORCH_LINES=off");
  REQUIRE(off.leaks == std::map<std::string, uint64_t>{{"outside forward, backward and step", 6}});
  // A program that sets the trace itself keeps its settings: frames for every block.
  LinesRun own = run_lines("VRAMTRACE_TORCH_LINES=1", "--own-history");
  REQUIRE(own.leaks == std::map<std::string, uint64_t>{{line, 6}});
  std::string every;
  for (int i = 0; i < 20; ++i) every += "frames ";
  REQUIRE(own.allocs == every);
}

// Every Python frame's file, anywhere in a report.
void python_files(const json& x, std::vector<std::string>* out) {
  if (x.is_object()) {
    if (x.value("python", false) && x.contains("file")) out->push_back(x["file"]);
    for (const auto& [k, v] : x.items()) python_files(v, out);
  } else if (x.is_array()) {
    for (const json& v : x) python_files(v, out);
  }
}

TEST_CASE("PyTorch's allocator traces of several processes: each frame's text whole") {
  // py_torch_procs.py: four processes, each with its PyTorch trace, each keeping 256 KiB made
  // at line 16. The collector reads the four traces into one list: their frames' text must
  // survive the list growing.
  const std::string script = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_procs.py";
  std::string dir = temp_dir();
  Result r = sh(kEnv + torch_env() + " " + kVramtrace + " run -o " + dir + " -- python3 " + script);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  json j = load_json(dir + "/report.json");
  REQUIRE(j["processes"].size() == 4);
  REQUIRE(j["leaks"].size() == 4);
  for (const json& g : j["leaks"]) {
    REQUIRE(g["site"] == "main (" + script + ":16)");
    REQUIRE(g["bytes"] == 256 * 1024);
  }
  std::vector<std::string> files;
  python_files(j, &files);
  REQUIRE(files.size() >= 4);
  for (const std::string& f : files) {
    INFO(f);
    REQUIRE((f == script || f.find("/fake_torch/torch/") != std::string::npos ||
             (f.find("/vramtrace-hook-") != std::string::npos && f.size() > 17 &&
              f.compare(f.size() - 17, 17, "/sitecustomize.py") == 0)));
  }
}

TEST_CASE("PyTorch's memory by category: no remedy where it would save next to nothing") {
  // py_torch_sampled.py workspace: 1 GiB taken outside PyTorch (as a library's workspace) and
  // kept, 14 MiB of PyTorch's at its most (step 75's 4 MiB batch and two 4 MiB outputs, the
  // 1 MiB weights, grads and momentum buffers). bf16, half the batch and a leaner optimizer
  // would each save under 1 % of the run's 1.02 GiB: none is offered.
  std::string dir = temp_dir();
  Result r = sh(kEnv + fake_torch_env(2048) + " " + kVramtrace + " run -o " + dir + " -- python3 " +
                VT_SOURCE_DIR + "/tests/programs/py_torch_sampled.py workspace");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  const json j = load_json(dir + "/report.json");
  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "peak");
  REQUIRE(dg["categories"]["outside_pytorch"] == 1024 * MiB);
  REQUIRE(dg["categories"]["activations"] == 8 * MiB);
  REQUIRE(dg["categories"]["inputs"] == 4 * MiB);
  REQUIRE(dg["remedies"] == json::array());
  REQUIRE_FALSE(contains(r.out, "remedy:"));
  // Taken by the program itself (ctypes, cudaMalloc) and never freed: a leak suspect.
  REQUIRE(j["leaks"].size() == 1);
  REQUIRE(j["leaks"][0]["bytes"] == 1024 * MiB);
  REQUIRE_FALSE(j["processes"][0]["devices"][0].contains("library_workspaces_at_exit_bytes"));
}

TEST_CASE("PyTorch's memory by category: a math library's workspace is no leak suspect") {
  // The same 1 GiB taken by a library whose name says cuBLAS (tests/programs/
  // libcublas_standin.cu), kept to the end as PyTorch keeps its cuBLAS handles' workspaces: a
  // library workspace at the peak, the library's own at exit.
  std::string dir = temp_dir();
  Result r = sh(kEnv + fake_torch_env(2048) + " " + kVramtrace + " run -o " + dir + " -- python3 " +
                VT_SOURCE_DIR + "/tests/programs/py_torch_sampled.py workspace " + kBuild +
                "/tests/programs/libvt_cublas_standin.so");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  const json j = load_json(dir + "/report.json");
  REQUIRE(j["diagnosis"]["categories"]["workspaces"] == 1024 * MiB);
  REQUIRE(j["diagnosis"]["categories"]["outside_pytorch"] == 0);
  REQUIRE(j["leaks"] == json::array());
  REQUIRE(j["processes"][0]["devices"][0]["library_workspaces_at_exit_bytes"] == 1024 * MiB);
  REQUIRE_FALSE(contains(r.out, "leak suspects"));
}

TEST_CASE("PyTorch's memory by category: cuBLAS's workspace in PyTorch's pool is no leak") {
  // py_torch_sampled.py cublas: fc1's first forward takes 2 MiB through PyTorch's allocator and
  // keeps it to the end, as PyTorch keeps a cuBLAS handle's workspace: a library workspace at
  // the peak, the library's own at exit.
  std::string dir = temp_dir();
  Result r = sh(kEnv + fake_torch_env(80) + " " + kVramtrace + " run -o " + dir + " -- python3 " +
                VT_SOURCE_DIR + "/tests/programs/py_torch_sampled.py cublas");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  const json j = load_json(dir + "/report.json");
  REQUIRE(j["devices"][0]["categories"]["at_peak"]["workspaces"] == 2 * MiB);
  REQUIRE(j["leaks"] == json::array());
  REQUIRE(j["processes"][0]["devices"][0]["library_workspaces_at_exit_bytes"] == 2 * MiB);
  REQUIRE(j["devices"][0]["final_live_bytes"] == 22 * MiB);
}

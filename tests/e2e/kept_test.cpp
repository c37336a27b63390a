// End-to-end tests of memory a PyTorch program keeps across iterations, on the stand-in PyTorch
// (tests/programs/py_torch_kept.py, whose header derives the sizes): an evaluation that keeps
// every forward's graph and a training loop that keeps every step's outputs, each read as its
// cause (not as fragmentation, a limit or leak suspects), with the fix's replayed peak checked
// against the replay of the same program with the fix applied.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "e2e/e2e_util.h"

using nlohmann::json;

namespace {

const std::string kKept = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_kept.py";

// `vramtrace run` of py_torch_kept.py on a stand-in device of `device_mib`.
json run_kept(const std::string& args, const std::string& dir, uint64_t device_mib, int code,
              std::string* out) {
  Result r = sh(kEnv + fake_torch_env(device_mib) + " " + kVramtrace + " run -o " + dir +
                " -- python3 " + kKept + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == code);
  *out = r.out;
  return load_json(dir + "/report.json");
}

// The reserved peak of a run's replay through the model of PyTorch's caching allocator.
uint64_t replayed_peak(const std::string& dir) {
  Result r = sh(kEnv + kVramtrace + " whatif " + dir + " --json 2>/dev/null");
  INFO(r.out);
  REQUIRE(r.code() == 0);
  return json::parse(r.out)["reserved_peak_bytes"].get<uint64_t>();
}

}  // namespace

TEST_CASE("kept: an evaluation with autograd on keeps every forward's graph") {
  const std::string dir = temp_dir();
  std::string out;
  // Six forwards, no OOM. At the peak (the sixth forward's head output) iterations 0-4 each
  // still hold their three 2 MiB outputs (30 MiB) and the fifth its 4 MiB head output (`out`,
  // rebound when the sixth returns): 34 MiB kept; iterations 0-3 are judged: 6 MiB each.
  json j = run_kept("eval", dir + "/eval", 80, 0, &out);
  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "peak");
  REQUIRE(dg["cause"]["kind"] == "kept_graph");
  REQUIRE(dg["cause"]["title"] ==
          "Each evaluation forward's autograd graph stays alive: 6.00 MiB per iteration of "
          "activations that no backward consumed (called at " +
              kKept + ":74), 34.00 MiB kept from 4 earlier iterations");
  REQUIRE(dg["growth"] == json({{"kind", "kept_graph"},
                                {"bytes_per_iteration", 6 * MiB},
                                {"kept_bytes", 34 * MiB},
                                {"iterations", 4}}));
  // The fixes first, each replayed through the allocator's model without the kept graphs:
  // 24 MiB reserved at the most, the replay of the same forwards run under torch.no_grad() for
  // real (below), against the run's own 64 MiB.
  const json& rs = dg["remedies"];
  REQUIRE(rs[0]["kind"] == "no_grad");
  REQUIRE(rs[0]["saves_bytes"] == 40 * MiB);
  REQUIRE(rs[0]["predicted_peak_bytes"] == 24 * MiB);
  REQUIRE(rs[0]["replayed"]["verdict"] == "fits");
  REQUIRE_FALSE(rs[0].contains("predicted_peak_high_bytes"));
  REQUIRE(rs[1]["kind"] == "accumulate_numbers");
  REQUIRE(rs[1]["saves_bytes"] == 40 * MiB);
  REQUIRE(rs[1]["predicted_peak_bytes"] == 24 * MiB);
  // The others cannot stop the growth, and say so.
  for (size_t i = 2; i < rs.size(); ++i) REQUIRE(rs[i]["leaves_growth"] == true);
  // The kept graph is not a list of leak suspects: 15 blocks of fc1-3 (iterations 0-4) are
  // marked kept; the sixth forward's three outputs are what is left.
  uint64_t kept = 0, suspects = 0;
  for (const json& l : j["leaks"])
    (l.contains("kept") ? kept : suspects) += l["count"].get<uint64_t>();
  REQUIRE(kept == 15);
  REQUIRE(suspects == 3);
  REQUIRE(out.find("vramtrace:   growing: Each evaluation forward's autograd graph") !=
          std::string::npos);
  // What each leads to, in the collector's words (under the stand-in run's 75 MiB limit), which
  // the summary prints as the page does.
  const std::string no_grad =
      "peak with it: 24.00 MiB; replayed through PyTorch's allocator: fits under 75.00 MiB";
  REQUIRE(rs[0]["outcome"] == no_grad);
  REQUIRE(rs[2]["kind"] == "activation_checkpointing");
  REQUIRE(rs[2]["outcome"] ==
          "not replayed: the modules named kept no activations in a training forward; memory "
          "still grows every iteration");
  REQUIRE(out.find("saves 40.00 MiB; " + no_grad + " (") != std::string::npos);
  // The fix applied for real: the same forwards under torch.no_grad(), replayed through the
  // same model, peak where the remedy's replay said.
  json fixed = run_kept("nograd", dir + "/nograd", 80, 0, &out);
  REQUIRE(fixed["devices"][0]["peak"]["bytes"] == 18 * MiB);  // the stand-in's own allocator
  REQUIRE_FALSE(fixed["diagnosis"].contains("cause"));
  REQUIRE(replayed_peak(dir + "/nograd") == 24 * MiB);
  REQUIRE(replayed_peak(dir + "/eval") == 64 * MiB);
}

TEST_CASE("kept: an evaluation whose kept graphs run out is that, not the device's capacity") {
  const std::string dir = temp_dir();
  std::string out;
  // On a 48 MiB device the sixth forward's head output does not fit: the kept graphs are the
  // first finding of the fatal OOM, ahead of how full the device was.
  json j = run_kept("eval", dir + "/eval", 48, 1, &out);
  REQUIRE(j["diagnosis"]["verdict"] == "oom");
  const json& o = j["oom"][0];
  REQUIRE(o["fatal"] == true);
  REQUIRE(o["findings"][0]["kind"] == "kept_graph");
  REQUIRE(o["findings"][0]["evidence"]["bytes_per_iteration"] == 6 * MiB);
  REQUIRE(o["findings"][0]["evidence"]["grown_bytes"] == 34 * MiB);
  REQUIRE(o["findings"][0]["evidence"]["modules"] ==
          json::parse(R"([{"module":"fc1","bytes":10485760},{"module":"fc2","bytes":10485760},
                          {"module":"fc3","bytes":10485760},{"module":"head","bytes":4194304}])"));
  REQUIRE(j["diagnosis"]["cause"]["kind"] == "kept_graph");
  REQUIRE(j["diagnosis"]["remedies"][0]["kind"] == "no_grad");
}

TEST_CASE("kept: a training loop that keeps each step's outputs") {
  const std::string dir = temp_dir();
  std::string out;
  // Six steps; at the peak iterations 0-4's head outputs are kept (20 MiB), 4 MiB a step, all
  // made by head at the forward's line.
  json j = run_kept("outputs", dir + "/outputs", 80, 0, &out);
  const json& dg = j["diagnosis"];
  REQUIRE(dg["cause"]["kind"] == "kept_outputs");
  REQUIRE(dg["cause"]["title"] ==
          "Outputs of each forward (made by head) are kept past their step (called at " + kKept +
              ":80): 4.00 MiB per iteration, 20.00 MiB kept from 4 earlier iterations");
  const json& fix = remedy(dg["remedies"], "detach_outputs");
  REQUIRE(dg["remedies"][0]["kind"] == "detach_outputs");
  REQUIRE(fix["saves_bytes"] == 20 * MiB);
  REQUIRE(fix["predicted_peak_bytes"] == 30 * MiB);  // replayed without the kept outputs
  REQUIRE(remedy(dg["remedies"], "smaller_batch")["leaves_growth"] == true);
  // Applied for real: the outputs kept as shapes on the host.
  json fixed = run_kept("detach", dir + "/detach", 80, 0, &out);
  REQUIRE(fixed["devices"][0]["peak"]["bytes"] == 26 * MiB);  // the stand-in's own allocator
  REQUIRE_FALSE(fixed["diagnosis"].contains("cause"));
  // Replayed through the same model, the fixed run peaks where the remedy's replay said.
  REQUIRE(replayed_peak(dir + "/detach") == 30 * MiB);
  // On a 48 MiB device the kept outputs end in an OOM: they are its first finding.
  json oom = run_kept("outputs 20", dir + "/oom", 48, 1, &out);
  REQUIRE(oom["oom"][0]["findings"][0]["kind"] == "kept_outputs");
  REQUIRE(oom["oom"][0]["findings"][0]["evidence"]["bytes_per_iteration"] == 4 * MiB);
}

namespace {

const std::string kState = std::string(VT_SOURCE_DIR) + "/tests/programs/py_torch_state.py";

json run_state(const std::string& args, const std::string& dir, std::string* out) {
  Result r = sh(kEnv + fake_torch_env() + " " + kVramtrace + " run -o " + dir + " -- python3 " +
                kState + " " + args);
  INFO(r.out);
  REQUIRE(r.code() == 0);
  REQUIRE(contains(r.out, "chunk 5 scored"));
  *out = r.out;
  return load_json(dir + "/report.json");
}

}  // namespace

TEST_CASE("kept: a state fed back from chunk to chunk keeps every chunk's graph") {
  const std::string dir = temp_dir();
  std::string out;
  // Six chunks, no OOM; at the peak (the sixth forward's workspace) chunks 0-4 each still hold
  // the 8.5 MiB linear() saved (cell's 4 + 0.5, head's 4): 42.5 MiB; chunks 0-3 are judged.
  // Only cell and head made them, and less than half of what each forward made (24.5 MiB):
  // read as outputs, the finding said "Outputs of each forward (made by cell) are kept past
  // their step" and offered `.logits`. What tells the cause: the state Recurrent returns comes
  // back into its next forward (the hook's FedBack marks), and 4.5 MiB of each chunk's 8.5 are
  // activations autograd saved, made before head's call (the forward's outputs are head's).
  json j = run_state("", dir + "/carried", &out);
  const json& dg = j["diagnosis"];
  REQUIRE(dg["verdict"] == "peak");
  REQUIRE(dg["cause"]["kind"] == "kept_graph");
  REQUIRE(dg["cause"]["title"] ==
          "The state Recurrent returns is fed back into its next forward (called at " + kState +
              ":62), and with autograd on it keeps every earlier forward's graph alive: 8.50 MiB "
              "per iteration of activations that no backward consumed, 42.50 MiB kept from 4 "
              "earlier iterations");
  REQUIRE(dg["growth"] == json({{"kind", "kept_graph"},
                                {"bytes_per_iteration", 8 * MiB + MiB / 2},
                                {"kept_bytes", 42 * MiB + MiB / 2},
                                {"iterations", 4}}));
  const json& rs = dg["remedies"];
  REQUIRE(rs[0]["kind"] == "detach_state");
  REQUIRE(rs[0]["title"] == "Detach the state Recurrent returns before its next forward");
  REQUIRE(rs[0]["how"] == "state = state.detach()   # after each forward, before the next");
  REQUIRE(rs[0]["saves_bytes"] == 42 * MiB + MiB / 2);
  // no_grad replayed without the kept blocks: 40 MiB at the most, which is the replay of the
  // same chunks run under torch.no_grad() for real (below), against the run's own 74 MiB.
  REQUIRE(rs[1]["kind"] == "no_grad");
  REQUIRE(rs[1]["saves_bytes"] == 34 * MiB);
  REQUIRE(rs[1]["predicted_peak_bytes"] == 40 * MiB);
  REQUIRE_THAT(rs[1]["assumption"].get<std::string>(),
               Catch::StartsWith("22.50 MiB of what is kept are activations autograd saved"));
  REQUIRE_FALSE(rs[1].contains("leaves_growth"));
  for (const json& r : rs) {
    REQUIRE(r["how"].get<std::string>().find(".logits") == std::string::npos);
    if (r["kind"] == "no_grad")
      REQUIRE(&r == &rs[1]);  // once, not also as a remedy that leaves growth
  }
  // An LSTM's state, (h, c): the example detaches both.
  json lstm = run_state("--lstm", dir + "/lstm", &out);
  REQUIRE(lstm["diagnosis"]["cause"]["kind"] == "kept_graph");
  REQUIRE(lstm["diagnosis"]["growth"]["bytes_per_iteration"] == 9 * MiB);
  REQUIRE(lstm["diagnosis"]["remedies"][0]["how"] ==
          "h, c = h.detach(), c.detach()   # after each forward, before the next");
  // Under torch.no_grad() nothing is saved: no kept memory, nothing grows.
  json fixed = run_state("--no-grad", dir + "/nograd", &out);
  REQUIRE(replayed_peak(dir + "/nograd") == 40 * MiB);
  REQUIRE_FALSE(fixed["diagnosis"].contains("cause"));
  REQUIRE_FALSE(fixed["diagnosis"].contains("growth"));
  REQUIRE(fixed["growth"].empty());
}

// `check` and `diff` on PyTorch reports (report/check_detail.cpp): the categories at the peak
// with their budgets, the modules and the Python lines that hold PyTorch's blocks instead of the
// allocator's segments, growth per iteration and OOMs that appeared, a changed command as a
// note. The reports are shaped like the H200's GPT-2 runs at batch 8 and 12: the segments'
// sites are the line that made a segment and a frame inside the caching allocator.
#include <catch2/catch.hpp>

#include "report/check.h"

using nlohmann::json;
using namespace vramtrace::report;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

// batch: 8 or 12; activations scale with it, the model's state does not.
json gpt2(int batch) {
  const uint64_t act = 6 * GiB * batch / 8, params = 475 * MiB, opt = 950 * MiB;
  const uint64_t cache = batch == 8 ? 300 * MiB : 280 * MiB, outside = 520 * MiB;
  const uint64_t peak = params * 2 + opt + act + cache + outside;
  json at_peak = {{"parameters", params},     {"gradients", params},       {"optimizer_state", opt},
                  {"activations", act},       {"temporaries", 0},          {"inputs", 0},
                  {"allocator_cache", cache}, {"outside_pytorch", outside}};
  json cats = {{"order",
                {"parameters", "gradients", "optimizer_state", "activations", "temporaries",
                 "inputs", "allocator_cache", "outside_pytorch"}},
               {"titles",
                {{"parameters", "parameters"},
                 {"gradients", "gradients"},
                 {"optimizer_state", "optimizer state"},
                 {"activations", "activations"},
                 {"temporaries", "temporaries"},
                 {"inputs", "inputs and data"},
                 {"allocator_cache", "allocator cache"},
                 {"outside_pytorch", "outside PyTorch"}}},
               {"at_peak", at_peak}};
  const std::string alloc_block =
      "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(...)";
  json by_site = {{{"site", "<module> (gpt2_train.py:23)"},
                   {"bytes", peak - 784 * MiB * batch / 8},
                   {"count", 30}},
                  {{"site", alloc_block}, {"bytes", 784 * MiB * batch / 8}, {"count", 2 * batch}}};
  json by_module = {{{"module", "transformer.h.0.mlp"}, {"bytes", act / 2}},
                    {{"module", "transformer.h.0.attn"}, {"bytes", act / 2}}};
  json by_line = {{{"site", "gpt2_train.py:41"},
                   {"bytes", act},
                   {"count", 96 * batch},
                   {"categories", {{"activations", act}}},
                   {"module", "transformer.h.0.mlp"}},
                  {{"site", "gpt2_train.py:23"},
                   {"bytes", params},
                   {"count", 148},
                   {"categories", {{"parameters", params}}}},
                  {{"site", "gpt2_train.py:44"},
                   {"bytes", params + opt},
                   {"count", 444},
                   {"categories", {{"gradients", params}, {"optimizer_state", opt}}}}};
  json dev = {{"index", 0},
              {"name", "NVIDIA H200"},
              {"total_bytes", 140 * GiB},
              {"peak",
               {{"bytes", peak},
                {"time_ns", 12 * 1000000000ull},
                {"by_site", by_site},
                {"by_library", json::array()},
                {"by_module", by_module},
                {"by_line", by_line}}},
              {"categories", cats}};
  json pdev = {{"index", 0}, {"peak", {{"bytes", peak}, {"by_site", by_site}}}};
  json growth = json::array();
  if (batch == 12)
    growth.push_back(
        {{"site", "gpt2_train.py:52"}, {"bytes_per_iteration", 8 * MiB}, {"device", 0}});
  return {{"schema", "vramtrace.report/1"},
          {"run",
           {{"command", {"python", "gpt2_train.py", "--batch", std::to_string(batch)}},
            {"complete", true},
            {"exit_code", 0}}},
          {"devices", {dev}},
          {"processes", {{{"pid", 4242}, {"profiled", true}, {"devices", {pdev}}}}},
          {"leaks", json::array()},
          {"oom", json::array()},
          {"growth", growth}};
}

}  // namespace

TEST_CASE("check names PyTorch's categories, modules and lines, never the allocator's frames") {
  Budgets budgets;
  CheckResult r = compare(gpt2(8), gpt2(12), budgets);
  const std::string text = check_text(r);
  INFO(text);
  CHECK(gate_exit_code(r) == 1);
  CHECK(text ==
        "vramtrace check: device 0 (NVIDIA H200): baseline 8.66 GiB, candidate 11.64 GiB, "
        "+2.98 GiB (+34.4%), budget +5% (up to 9.09 GiB): REGRESSION\n"
        "  by category at the peak: activations +3.00 GiB (6.00 GiB -> 9.00 GiB), allocator "
        "cache -20.00 MiB (300.00 MiB -> 280.00 MiB); unchanged: parameters, gradients, "
        "optimizer state, outside PyTorch\n"
        "  module grew: transformer.h.0.attn +1.50 GiB\n"
        "  module grew: transformer.h.0.mlp +1.50 GiB\n"
        "  line grew: gpt2_train.py:41 +3.00 GiB at the peak (activations; module "
        "transformer.h.0.mlp; "
        "768 -> 1152 blocks)\n"
        "vramtrace check: NOTE: the candidate ran another command than the baseline: 'python "
        "gpt2_train.py --batch 12', the baseline 'python gpt2_train.py --batch 8'\n"
        "vramtrace check: growth per iteration new in the candidate: gpt2_train.py:52 (device 0) "
        "grows 8.00 MiB per iteration\n"
        "vramtrace check: FAILED: 1 of 1 over budget\n");
  CHECK(r.incomplete.empty());

  const std::string md = check_markdown(r);
  INFO(md);
  CHECK(md.find("| activations | 6.00 GiB | 9.00 GiB | +3.00 GiB (+50.0%) | - |") !=
        std::string::npos);
  CHECK(md.find("| parameters | 475.00 MiB | 475.00 MiB | - | - |") != std::string::npos);
  CHECK(md.find("- gpt2_train.py:41 +3.00 GiB (activations; module transformer.h.0.mlp)") !=
        std::string::npos);
  CHECK(md.find("**Note**: the candidate ran another command than the baseline: 'python "
                "gpt2_train.py --batch 12', the baseline 'python gpt2_train.py --batch 8'\n") !=
        std::string::npos);
  CHECK(md.find("CUDACachingAllocator") == std::string::npos);
  CHECK(md.find("INCOMPLETE") == std::string::npos);
  const std::string xml = check_junit(r);
  CHECK(xml.find("CUDACachingAllocator") == std::string::npos);
  CHECK(xml.find("line grew: gpt2_train.py:41 +3.00 GiB at the peak") != std::string::npos);

  const std::string diff = diff_text(r);
  INFO(diff);
  CHECK(diff.find("CUDACachingAllocator") == std::string::npos);
  CHECK(diff.find("  by category at the peak: activations +3.00 GiB") != std::string::npos);
}

TEST_CASE("budgets per category: parameters may not grow, activations by 5%") {
  Budgets b;
  add_increase_option(b, "parameters:0");
  add_increase_option(b, "activations:5%");
  add_increase_option(b, "60%");  // the peak may grow: only the categories' budgets fail it
  REQUIRE(b.by_category.size() == 2);
  CHECK(b.max_increase.percent == 60.0);
  CheckResult r = compare(gpt2(8), gpt2(12), b);
  const std::string text = check_text(r);
  INFO(text);
  CHECK(gate_exit_code(r) == 1);
  CHECK(text.find("budget +60% (up to 13.85 GiB): ok\n") != std::string::npos);
  CHECK(text.find("  budget parameters +0 B (up to 475.00 MiB): +0 B, ok\n") != std::string::npos);
  CHECK(text.find("  budget activations +5% (up to 6.30 GiB): +3.00 GiB, REGRESSION\n") !=
        std::string::npos);
  CHECK(text.find("vramtrace check: FAILED: 1 of 1 over budget\n") != std::string::npos);
  CHECK(check_junit(r).find("<failure message=\"activations +3.00 GiB (9.00 GiB) over budget "
                            "+5% (up to 6.30 GiB)\">") != std::string::npos);

  // Within both: passes.
  Budgets ok;
  add_increase_option(ok, "parameters:0");
  add_increase_option(ok, "activations:60%");
  add_increase_option(ok, "60%");
  CheckResult pass = compare(gpt2(8), gpt2(12), ok);
  CHECK(gate_exit_code(pass) == 0);
  CHECK(check_text(pass).find("PASSED: 1 within budget") != std::string::npos);

  // A device budget still reads as one; a word that is no category is refused.
  Budgets dev;
  add_increase_option(dev, "0:10%");
  CHECK(dev.max_increase_by_device.at(0).percent == 10.0);
  CHECK_THROWS_WITH(add_increase_option(dev, "activation:5%"),
                    Catch::Contains("expected DEVICE:BUDGET"));
  CHECK_THROWS_AS(add_increase_option(dev, "activations:lots"), CheckError);
}

TEST_CASE("a category budget that either run cannot be measured against is an error") {
  // Read as 0 B, a side without categories passed any budget ("activations -10.17 GiB, ok").
  json a = gpt2(8), b = gpt2(8), none = gpt2(8);
  none["devices"][0].erase("categories");
  Budgets budgets;
  add_increase_option(budgets, "activations:0");
  CHECK_THROWS_WITH(compare(a, none, budgets),
                    Catch::StartsWith("the budget on activations cannot be checked on device 0 "
                                      "(NVIDIA H200): the candidate has no PyTorch categories"));
  CHECK_THROWS_WITH(compare(none, b, budgets),
                    Catch::StartsWith("the budget on activations cannot be checked on device 0 "
                                      "(NVIDIA H200): the baseline has no PyTorch categories"));
  CHECK_THROWS_WITH(compare(none, none, budgets),
                    Catch::StartsWith("the budgets per category cannot be checked: neither run "
                                      "has PyTorch's categories"));
  // Without a budget per category, a run without them is compared as before.
  CHECK(gate_exit_code(compare(a, none, Budgets{})) == 0);
}

TEST_CASE("OOMs that appeared or went are said, with the user's line") {
  json a = gpt2(8), b = gpt2(8);
  b["oom"] = {{{"device", 0},
               {"requested_bytes", 2 * GiB},
               {"python_site", "gpt2_train.py:41"},
               {"phase", "forward"},
               {"iteration", 3},
               {"recovered", true}}};
  CheckResult r = compare(a, b, Budgets{});
  CHECK(r.oom_changes ==
        std::vector<std::string>{"appeared in the candidate: device 0: 2.00 GiB requested at "
                                 "gpt2_train.py:41 (forward, iteration 3), recovered"});
  CheckResult back = compare(b, a, Budgets{});
  CHECK(back.oom_changes ==
        std::vector<std::string>{"gone in the candidate: device 0: 2.00 GiB requested at "
                                 "gpt2_train.py:41 (forward, iteration 3), recovered"});
  CHECK(check_text(back).find("vramtrace check: out-of-memory gone in the candidate: device 0") !=
        std::string::npos);
}

// The effective limit and the PyTorch remedies (collector/analysis/diagnosis.h) from given
// categories: which remedies a moment's figures support, and exactly what each saves.
#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/run_diagnosis.h"
#include "collector/predict/whatif.h"

using namespace vramtrace::collector;

namespace {

constexpr uint64_t GiB = 1ull << 30;

void set(CategoryBytes& c, Category k, uint64_t v) { c[static_cast<size_t>(k)] = v; }

const Remedy* find(const std::vector<Remedy>& v, const std::string& kind) {
  for (const Remedy& r : v)
    if (r.name() == kind) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("remedies: an Adam-trained model whose state alone exceeds the limit is told to shard") {
  RemedyInput in;
  set(in.at, Category::Parameters, 4 * GiB);
  set(in.at, Category::Gradients, 4 * GiB);
  set(in.at, Category::OptimizerState, 8 * GiB);
  set(in.at, Category::Activations, 2 * GiB);
  in.total = 18 * GiB;
  in.limit = 16 * GiB;
  in.request = 1 * GiB;
  in.optimizer_state_per_param = 2;  // exp_avg, exp_avg_sq
  in.param_dtype = "float32";
  auto r = pytorch_remedies(in);
  const Remedy* offload = find(r, "offload");
  REQUIRE(offload);
  // Model state 16 GiB against a 16 GiB limit: keeping at most half the limit for it.
  REQUIRE(offload->saves_bytes == 8 * GiB);
  const Remedy* lean = find(r, "leaner_optimizer");
  REQUIRE(lean);
  REQUIRE(lean->saves_bytes == 4 * GiB);  // one of Adam's two tensors per parameter
  const Remedy* amp = find(r, "mixed_precision");
  REQUIRE(amp);
  REQUIRE(amp->saves_bytes == 1 * GiB);  // half the activations
  const Remedy* batch = find(r, "smaller_batch");
  REQUIRE(batch);
  REQUIRE(batch->saves_bytes == 1 * GiB);
  REQUIRE(batch->how ==
          "parameters, gradients and optimizer state alone exceed the limit: no batch fits");
  // Ranked by what each saves.
  for (size_t i = 1; i < r.size(); ++i) REQUIRE(r[i - 1].saves_bytes >= r[i].saves_bytes);
  REQUIRE(r[0].kind == RemedyKind::Offload);
}

TEST_CASE("remedies: an OOM while Adam makes its state counts the whole state, not what was made") {
  // The first optimizer.step() dies making exp_avg/exp_avg_sq: 2 GiB of parameters and of
  // gradients, 1.5 GiB of state made so far, under a 6 GiB cap (the H200 case of
  // tests/gpu/real/model_state_oom.py).
  RemedyInput in;
  set(in.at, Category::Parameters, 2 * GiB);
  set(in.at, Category::Gradients, 2 * GiB);
  set(in.at, Category::OptimizerState, 3 * GiB / 2);
  set(in.at, Category::Activations, 64ull << 20);
  in.total = 2 * GiB + 2 * GiB + 3 * GiB / 2 + (64ull << 20);
  in.limit = 6 * GiB;
  in.request = 128ull << 20;
  in.optimizer_state_per_param = 2;
  in.partial_step = true;
  in.param_dtype = "float32";
  auto r = pytorch_remedies(in);
  REQUIRE(r[0].kind == RemedyKind::Offload);
  REQUIRE(r[0].saves_bytes == 8 * GiB - 3 * GiB);  // 2 + 2 + 4 GiB, keeping half the limit
  const Remedy* lean = find(r, "leaner_optimizer");
  REQUIRE(lean);
  REQUIRE(lean->saves_bytes == 2 * GiB);  // half of Adam's whole 4 GiB
  const Remedy* batch = find(r, "smaller_batch");
  REQUIRE(batch);
  REQUIRE(batch->how ==
          "parameters, gradients and optimizer state alone exceed the limit: no batch fits");
}

TEST_CASE("remedies: what the figures do not support is not offered") {
  RemedyInput in;
  set(in.at, Category::Parameters, 1 * GiB);
  set(in.at, Category::Activations, 6 * GiB);
  set(in.at, Category::Temporaries, 2 * GiB);
  set(in.at, Category::AllocatorCache, 1 * GiB);
  in.total = 10 * GiB;
  in.limit = 10 * GiB;
  in.request = 512ull << 20;
  in.autocast = true;  // already mixed precision
  auto r = pytorch_remedies(in);
  REQUIRE_FALSE(find(r, "mixed_precision"));
  REQUIRE_FALSE(find(r, "leaner_optimizer"));     // no optimizer state
  REQUIRE_FALSE(find(r, "expandable_segments"));  // not fragmented
  REQUIRE_FALSE(find(r, "no_grad"));
  REQUIRE_FALSE(find(r, "offload"));
  const Remedy* batch = find(r, "smaller_batch");
  REQUIRE(batch);
  REQUIRE(batch->saves_bytes == 4 * GiB);  // half of activations and temporaries
  // 10.5 GiB needed, 8 GiB of it per batch: (10 - 2.5) / 8 = 93.75 %.
  REQUIRE(batch->how == "the largest batch that fits the limit is about 94% of this one");
}

TEST_CASE("effective limit: the card, PyTorch's fraction, other processes") {
  REQUIRE(effective_limit(80 * GiB, nullptr, 0, std::nullopt).kind == "device");
  REQUIRE(effective_limit(80 * GiB, nullptr, 0, std::nullopt).bytes == 80 * GiB);
  auto others = effective_limit(80 * GiB, nullptr, 0, 70 * GiB);
  REQUIRE(others.kind == "other_processes");
  REQUIRE(others.bytes == 10 * GiB);
  // A context's own overhead (under 1 GiB) held elsewhere is not a limit of its own.
  REQUIRE(effective_limit(80 * GiB, nullptr, 0, 512ull << 20).kind == "device");
  TorchContext ctx;
  ctx.present = true;
  ctx.limits[0] = {0.25, 80 * GiB};
  TorchMemory tm(std::move(ctx));
  auto frac = effective_limit(80 * GiB, &tm, 0, std::nullopt);
  REQUIRE(frac.kind == "per_process_fraction");
  REQUIRE(frac.bytes == 20 * GiB);
  // The tighter of the two wins.
  REQUIRE(effective_limit(80 * GiB, &tm, 0, 70 * GiB).kind == "other_processes");
  REQUIRE(effective_limit(80 * GiB, &tm, 0, 30 * GiB).kind == "per_process_fraction");
}

namespace {

constexpr uint64_t MiB = 1ull << 20;

// One forward of an encoder whose 12 layers (called in order: ids 2..13) each keep `bytes(i)`
// of activations.
template <typename Bytes>
TorchMemory encoder(Bytes bytes) {
  TorchContext ctx;
  ctx.present = true;
  ctx.modules.push_back({"encoder", "Encoder", "model.py", 10});
  ctx.marks.push_back({100, MarkKind::Forward, 1, false});
  for (uint32_t i = 0; i < 12; ++i) {
    ctx.modules.push_back({"encoder_layer_" + std::to_string(i), "Layer", "model.py", 20});
    const uint64_t t = 110 + 20 * i;
    ctx.marks.push_back({t, MarkKind::Module, i + 2, false});
    ctx.blocks.push_back({0, 0x100000ull * (i + 1), bytes(i), t + 5, UINT64_MAX});
    ctx.marks.push_back({t + 10, MarkKind::ModuleEnd, i + 2, false});
  }
  ctx.marks.push_back({1000, MarkKind::ForwardEnd, 1, false});
  return TorchMemory(std::move(ctx));
}

std::vector<std::string> names(const std::vector<ModuleBytes>& v) {
  std::vector<std::string> out;
  for (const ModuleBytes& m : v) out.push_back(m.name);
  return out;
}

}  // namespace

TEST_CASE("modules of equal bytes are listed in the model's order, not as text") {
  const TorchMemory tm = encoder([](uint32_t) { return 1 * MiB; });
  const auto mods = live_by_module(tm, 0, 2000, true);
  std::vector<std::string> want;
  for (int i = 0; i < 12; ++i) want.push_back("encoder_layer_" + std::to_string(i));
  CHECK(names(mods) == want);
  CHECK(mods[10].bytes == 1 * MiB);
  CHECK(mods[10].first_call == 12);
  CHECK(names(checkpoint_groups(mods, 12 * MiB)) == want);

  RemedyInput in;
  set(in.at, Category::Activations, 12 * MiB);
  in.total = 12 * MiB;
  in.limit = 12 * MiB;
  in.request = 1 * MiB;
  in.activations_by_module = checkpoint_groups(mods, 12 * MiB);
  const std::vector<Remedy> remedies = pytorch_remedies(in);
  const Remedy* ckpt = find(remedies, "activation_checkpointing");
  REQUIRE(ckpt);
  CHECK(ckpt->title ==
        "Checkpoint the modules that hold the most activations: encoder_layer_0, "
        "encoder_layer_1, encoder_layer_2, encoder_layer_3, encoder_layer_4, encoder_layer_5");
  CHECK(ckpt->saves_bytes == 5 * MiB);
}

TEST_CASE("the modules a remedy names: the largest, named in the model's order") {
  // Layers 9, 10 and 11 hold the most (3 MiB each), layer 2 next (2 MiB), the rest 1 MiB.
  const TorchMemory tm = encoder([](uint32_t i) {
    return i >= 9 ? 3 * MiB : i == 2 ? 2 * MiB : 1 * MiB;
  });
  const auto mods = live_by_module(tm, 0, 2000, true);
  CHECK(names(mods) ==
        std::vector<std::string>{"encoder_layer_9", "encoder_layer_10", "encoder_layer_11",
                                 "encoder_layer_2", "encoder_layer_0", "encoder_layer_1",
                                 "encoder_layer_3", "encoder_layer_4", "encoder_layer_5",
                                 "encoder_layer_6", "encoder_layer_7", "encoder_layer_8"});
  RemedyInput in;
  set(in.at, Category::Activations, 19 * MiB);
  in.total = 19 * MiB;
  in.limit = 19 * MiB;
  in.request = 1 * MiB;
  in.activations_by_module = checkpoint_groups(mods, 19 * MiB);
  const std::vector<Remedy> remedies = pytorch_remedies(in);
  const Remedy* ckpt = find(remedies, "activation_checkpointing");
  REQUIRE(ckpt);
  CHECK(ckpt->title ==
        "Checkpoint the modules that hold the most activations: encoder_layer_0, "
        "encoder_layer_1, encoder_layer_2, encoder_layer_9, encoder_layer_10, encoder_layer_11");
  CHECK(ckpt->saves_bytes == 10 * MiB);  // 3+3+3+2+1+1 less the largest, 3
}

TEST_CASE("remedy kinds: one table, each kind named once and told only to its programs") {
  // The table's rows are in the enum's order, each name found again by its lookup.
  std::set<std::string> names;
  for (size_t i = 0; i < kRemedyKindCount; ++i) {
    const RemedyKindRow& row = kRemedyKinds[i];
    REQUIRE(static_cast<size_t>(row.kind) == i);
    // Only a replayed kind has no reason for not being replayed.
    REQUIRE(std::string(row.not_replayed_because).empty() ==
            (row.predicted_by != PredictedBy::NotReplayed));
    if (row.kind == RemedyKind::FindingAdvice) {
      REQUIRE(std::string(row.name).empty());  // named by its finding
      continue;
    }
    REQUIRE(names.insert(row.name).second);
    REQUIRE(remedy_kind_named(row.name) == row.kind);
  }
  REQUIRE_FALSE(remedy_kind_named(""));
  REQUIRE_FALSE(remedy_kind_named("fragmentation"));
  REQUIRE_THROWS_AS(RemedyChange("no_such_remedy"), std::invalid_argument);
  REQUIRE(RemedyChange("no_grad").kind == RemedyKind::NoGrad);
  Remedy advice;
  advice.finding = "fragmentation";
  REQUIRE(advice.name() == "fragmentation");

  // Every remedy PyTorch's figures support is a PyTorch one; a native program's are CUDA's.
  RemedyInput in;
  set(in.at, Category::Parameters, 4 * GiB);
  set(in.at, Category::Gradients, 4 * GiB);
  set(in.at, Category::OptimizerState, 8 * GiB);
  set(in.at, Category::Activations, 2 * GiB);
  set(in.at, Category::AllocatorCache, 1 * GiB);
  in.total = 19 * GiB;
  in.limit = 16 * GiB;
  in.optimizer_state_per_param = 2;
  in.fragmented = true;
  in.eval_activations = 1 * GiB;
  in.activations_by_module = {{"layer1", 1 * GiB, 1}, {"layer2", 1 * GiB, 2}};
  const auto torch = pytorch_remedies(in);
  REQUIRE(torch.size() == 7);
  for (const Remedy& r : torch)
    REQUIRE(remedy_kind_row(r.kind).audience == RemedyAudience::PyTorch);
  NativeRemedyInput nin;
  nin.growth_site = "train_step (train.cu:40)";
  nin.grown_bytes = 4 * GiB;
  nin.bytes_per_iteration = 1 * GiB;
  nin.needed = 20 * GiB;
  nin.limit = 16 * GiB;
  nin.fragmented = true;
  const auto native = native_remedies(nin);
  REQUIRE(native.size() == 3);
  for (const Remedy& r : native)
    REQUIRE(remedy_kind_row(r.kind).audience == RemedyAudience::Native);
}

TEST_CASE("remedies: a run of numbered blocks is named by its first and last, others in full") {
  using vramtrace::collector::module_list_text;
  std::vector<std::string> gpt2;
  for (int i = 0; i < 12; ++i) gpt2.push_back("transformer.h." + std::to_string(i));
  CHECK(module_list_text(gpt2) == "transformer.h.0 to transformer.h.11 (12 blocks)");
  // Two are said in full; so are blocks of two parents, a gap, and numbers not counting up.
  CHECK(module_list_text({}).empty());
  CHECK(module_list_text({"layers.0", "layers.1"}) == "layers.0, layers.1");
  CHECK(module_list_text({"encoder.layer.0", "encoder.layer.1", "decoder.layer.0"}) ==
        "encoder.layer.0, encoder.layer.1, decoder.layer.0");
  CHECK(module_list_text({"layer1.0", "layer1.1", "layer1.3"}) == "layer1.0, layer1.1, layer1.3");
  CHECK(module_list_text({"blocks.2", "blocks.1", "blocks.0"}) == "blocks.2, blocks.1, blocks.0");
  CHECK(module_list_text({"stage.07", "stage.08", "stage.09"}) == "stage.07, stage.08, stage.09");
  CHECK(module_list_text({"blocks.4", "blocks.5", "blocks.6"}) ==
        "blocks.4 to blocks.6 (3 blocks)");
}

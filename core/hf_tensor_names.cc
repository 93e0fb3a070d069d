// Each family's tensor names (golden README, "Hugging Face families") as
// data: a name template per weight role, and how a tensor that holds every
// expert keeps a role's rows. One interpreter turns a family's table into
// tensor locations, so a family whose names follow a known layout is a
// table, not a function.
#include "core/hf_tensor_names.h"

#include <deque>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/hf_config.h"

namespace moe {
namespace {

// How a role's weight lies in its tensor. The x·W kinds fuse all experts
// for x·W ([E, in, C]); the linear kinds pack nn.Linear weights ([E, C,
// in]); the bias kinds hold one row per expert ([E, C]). "Halves" keeps the
// gate rows (w1 / b1) first and the up rows after them; "interleaved" keeps
// gate j at 2j and up j at 2j+1.
enum class Layout {
  kOwn,              // one tensor per role (per expert where {e} appears)
  kXwHalves,         // [E, H, 2I]
  kXwInterleaved,    // [E, H, 2I]
  kXwDown,           // [E, I, H]
  kBiasInterleaved,  // [E, 2I]
  kBiasDown,         // [E, H]
  kLinearHalves,     // [E, 2I, H]
  kLinearDown,       // [E, H, I]
  // One shared expert's nn.Linear gate rows over its up rows, [2S, H]
  // (Granite's shared_mlp.input_linear), read as one expert of [1, 2S, H].
  kSharedLinearHalves,
  // DBRX's per-role tensors of every expert's rows, [E*I, H]: w1 / v1 are
  // nn.Linear rows (x·Wᵀ), w2 is x·W (each expert's [I, H] times its
  // intermediate), read as [E, I, H].
  kRowsLinear,
  kRowsXwDown,
  kLinearRole,  // [E, I, H]: one role's rows (gate or up) alone
};

// A role's tensor name: {p} stands for the layer prefix, {e} for the
// expert index.
struct RoleName {
  WeightRole role;
  std::string name;
  Layout layout = Layout::kOwn;
};
using NameTable = std::vector<RoleName>;

// A family's names: one tensor per role and expert, and, for families that
// transformers v5 may save with packed experts, the names it then uses.
struct FamilyNames {
  std::vector<HfFamily> families;
  NameTable per_expert;
  NameTable packed = {};
};

// `table` with the entries of `changes` in place of its own for their roles.
NameTable With(NameTable table, const NameTable& changes) {
  for (const RoleName& change : changes) {
    bool replaced = false;
    for (RoleName& entry : table) {
      if (entry.role == change.role) {
        entry = change;
        replaced = true;
      }
    }
    if (!replaced) table.push_back(change);
  }
  return table;
}

// Routed experts under `m` named {e}.<w1>/<w3>/<w2>, with their biases.
NameTable Experts(const std::string& m, const char* w1, const char* w3,
                  const char* w2) {
  const std::string e = m + "experts.{e}.";
  return {{WeightRole::kW1, e + w1 + ".weight"},
          {WeightRole::kW3, e + w3 + ".weight"},
          {WeightRole::kW2, e + w2 + ".weight"},
          {WeightRole::kB1, e + w1 + ".bias"},
          {WeightRole::kB3, e + w3 + ".bias"},
          {WeightRole::kB2, e + w2 + ".bias"}};
}

// The shared expert under `s` named <w1>/<w3>/<w2>.
NameTable Shared(const std::string& s, const char* w1, const char* w3,
                 const char* w2) {
  return {{WeightRole::kSharedW1, s + w1 + ".weight"},
          {WeightRole::kSharedW3, s + w3 + ".weight"},
          {WeightRole::kSharedW2, s + w2 + ".weight"}};
}

// A gate.weight router under `m` with its bias, correction bias and hash
// table (the 2026 roles in the generic form of the moe_* extension keys).
NameTable Router(const std::string& m, const std::string& expert_bias) {
  return {{WeightRole::kGate, m + "gate.weight"},
          {WeightRole::kRouterBias, m + "gate.bias"},
          {WeightRole::kExpertBias, m + expert_bias},
          {WeightRole::kTid2Eid, m + "gate.tid2eid"}};
}

// mlp.* with {gate,up,down}_proj experts (Qwen, OLMoE, DeepSeek, GLM,
// Kimi): `shared` is "shared_expert." (Qwen) or "shared_experts.".
NameTable MlpNames(const char* shared, const char* expert_bias) {
  const std::string m = "{p}mlp.";
  return With(With(With(Router(m, expert_bias),
                        Experts(m, "gate_proj", "up_proj", "down_proj")),
                   Shared(m + shared, "gate_proj", "up_proj", "down_proj")),
              {{WeightRole::kSharedGate, m + "shared_expert_gate.weight"}});
}

// transformers v5's packed experts: nn.Linear gate_up_proj [E, 2I, H] and
// down_proj [E, H, I] under mlp.* (Mixtral's block_sparse_moe. became mlp.
// in v5); the other roles keep their per-expert names.
NameTable Packed(NameTable mlp) {
  return With(
      std::move(mlp),
      {{WeightRole::kW1, "{p}mlp.experts.gate_up_proj", Layout::kLinearHalves},
       {WeightRole::kW3, "{p}mlp.experts.gate_up_proj", Layout::kLinearHalves},
       {WeightRole::kW2, "{p}mlp.experts.down_proj", Layout::kLinearDown}});
}

// The layout kinds' names in family files, each kind once.
const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kOwn:
      return "own";
    case Layout::kXwHalves:
      return "xw_halves";
    case Layout::kXwInterleaved:
      return "xw_interleaved";
    case Layout::kXwDown:
      return "xw_down";
    case Layout::kBiasInterleaved:
      return "bias_interleaved";
    case Layout::kBiasDown:
      return "bias_down";
    case Layout::kLinearHalves:
      return "linear_halves";
    case Layout::kLinearDown:
      return "linear_down";
    case Layout::kSharedLinearHalves:
      return "shared_linear_halves";
    case Layout::kRowsLinear:
      return "rows_linear";
    case Layout::kRowsXwDown:
      return "rows_xw_down";
    case Layout::kLinearRole:
      return "linear_role";
  }
  return nullptr;
}

// Every Layout value, found by its name (LayoutName is null past the last).
std::vector<Layout> AllLayouts() {
  std::vector<Layout> all;
  for (int i = 0; LayoutName(static_cast<Layout>(i)) != nullptr; ++i) {
    all.push_back(static_cast<Layout>(i));
  }
  return all;
}

// The built-in tables, then those family files add (a deque, so that
// adding one leaves the others where they are).
std::deque<FamilyNames>& NameTables() {
  static auto* tables = [] {
    const NameTable mlp =
        MlpNames("shared_experts.", "gate.e_score_correction_bias");
    const NameTable qwen_mlp =
        MlpNames("shared_expert.", "gate.e_score_correction_bias");
    // ERNIE 4.5 keeps its correction bias [1, E] in moe_statics.
    const NameTable ernie_mlp =
        MlpNames("shared_experts.", "moe_statics.e_score_correction_bias");
    // MiniMax-M2 keeps the correction bias beside the gate, not in it.
    const std::string bsm = "{p}block_sparse_moe.";
    const NameTable block_sparse = With(Router(bsm, "e_score_correction_bias"),
                                        Experts(bsm, "w1", "w3", "w2"));
    const std::string ff = "{p}feed_forward.";
    const std::string gpt = "{p}mlp.";
    const std::string v4 = "{p}ffn.";
    const std::string mixer = "{p}mixer.";
    const std::string kimi = "{p}block_sparse_moe.";
    return new std::deque<FamilyNames>{
        {{HfFamily::kMixtral, HfFamily::kMinimaxM2}, block_sparse, Packed(mlp)},
        {{HfFamily::kQwen2Moe, HfFamily::kQwen3Next},
         qwen_mlp,
         Packed(qwen_mlp)},
        {{HfFamily::kQwen3Moe, HfFamily::kOlmoe, HfFamily::kDeepseekV2,
          HfFamily::kDeepseekV3, HfFamily::kGlm4Moe},
         mlp,
         Packed(mlp)},
        {{HfFamily::kErnie45Moe}, ernie_mlp, Packed(ernie_mlp)},
        // Llama 4: x·W gate_up_proj [E, H, 2I] (gate columns first) and
        // down_proj [E, I, H]; the shared expert always there.
        {{HfFamily::kLlama4, HfFamily::kLlama4Text},
         With(
             {{WeightRole::kGate, ff + "router.weight"},
              {WeightRole::kW1, ff + "experts.gate_up_proj", Layout::kXwHalves},
              {WeightRole::kW3, ff + "experts.gate_up_proj", Layout::kXwHalves},
              {WeightRole::kW2, ff + "experts.down_proj", Layout::kXwDown}},
             Shared(ff + "shared_expert.", "gate_proj", "up_proj",
                    "down_proj"))},
        // gpt-oss: router with bias; gate and up interleaved on the 2I axis
        // of the x·W tensor and of its bias.
        {{HfFamily::kGptOss},
         {{WeightRole::kGate, gpt + "router.weight"},
          {WeightRole::kRouterBias, gpt + "router.bias"},
          {WeightRole::kW1, gpt + "experts.gate_up_proj",
           Layout::kXwInterleaved},
          {WeightRole::kW3, gpt + "experts.gate_up_proj",
           Layout::kXwInterleaved},
          {WeightRole::kW2, gpt + "experts.down_proj", Layout::kXwDown},
          {WeightRole::kB1, gpt + "experts.gate_up_proj_bias",
           Layout::kBiasInterleaved},
          {WeightRole::kB3, gpt + "experts.gate_up_proj_bias",
           Layout::kBiasInterleaved},
          {WeightRole::kB2, gpt + "experts.down_proj_bias",
           Layout::kBiasDown}}},
        // DeepSeek-V4's upstream names: ffn.*, w1/w3/w2 linears; gate.bias
        // is the correction bias, for choosing only.
        {{HfFamily::kDeepseekV4},
         With(With({{WeightRole::kGate, v4 + "gate.weight"},
                    {WeightRole::kExpertBias, v4 + "gate.bias"},
                    {WeightRole::kTid2Eid, v4 + "gate.tid2eid"}},
                   {{WeightRole::kW1, v4 + "experts.{e}.w1.weight"},
                    {WeightRole::kW3, v4 + "experts.{e}.w3.weight"},
                    {WeightRole::kW2, v4 + "experts.{e}.w2.weight"}}),
              Shared(v4 + "shared_experts.", "w1", "w3", "w2"))},
        // Nemotron 3: mixer.*, non-gated experts (no gate proj, kW1 and
        // kSharedW1 absent), LatentMoE's fc1 / fc2_latent_proj with their
        // mlp_bias biases.
        {{HfFamily::kNemotronH},
         {{WeightRole::kGate, mixer + "gate.weight"},
          {WeightRole::kExpertBias, mixer + "gate.e_score_correction_bias"},
          {WeightRole::kW3, mixer + "experts.{e}.up_proj.weight"},
          {WeightRole::kW2, mixer + "experts.{e}.down_proj.weight"},
          {WeightRole::kSharedW3, mixer + "shared_experts.up_proj.weight"},
          {WeightRole::kSharedW2, mixer + "shared_experts.down_proj.weight"},
          {WeightRole::kLatentW1, mixer + "fc1_latent_proj.weight"},
          {WeightRole::kLatentW2, mixer + "fc2_latent_proj.weight"},
          {WeightRole::kLatentB1, mixer + "fc1_latent_proj.bias"},
          {WeightRole::kLatentB2, mixer + "fc2_latent_proj.bias"}}},
        // Gemma 4: router.* with its scales, the experts always packed as
        // nn.Linear weights, the dense MLP as the shared expert, and the
        // four norms around the branches (multiplied as stored).
        {{HfFamily::kGemma4},
         With({{WeightRole::kW1, "{p}experts.gate_up_proj",
                Layout::kLinearHalves},
               {WeightRole::kW3, "{p}experts.gate_up_proj",
                Layout::kLinearHalves},
               {WeightRole::kW2, "{p}experts.down_proj", Layout::kLinearDown},
               {WeightRole::kGate, "{p}router.proj.weight"},
               {WeightRole::kGateScale, "{p}router.scale"},
               {WeightRole::kPerExpertScale, "{p}router.per_expert_scale"},
               {WeightRole::kSharedInNorm,
                "{p}pre_feedforward_layernorm.weight"},
               {WeightRole::kSharedOutNorm,
                "{p}post_feedforward_layernorm_1.weight"},
               {WeightRole::kExpertsInNorm,
                "{p}pre_feedforward_layernorm_2.weight"},
               {WeightRole::kExpertsOutNorm,
                "{p}post_feedforward_layernorm_2.weight"}},
              Shared("{p}mlp.", "gate_proj", "up_proj", "down_proj"))},
        // Kimi K3: block_sparse_moe.* with w1/w3/w2 experts and the latent
        // projections routed_expert_down_proj (H -> latent),
        // routed_expert_norm and routed_expert_up_proj (latent -> H).
        {{HfFamily::kKimiK3},
         With({{WeightRole::kGate, kimi + "gate.weight"},
               {WeightRole::kExpertBias, kimi + "gate.e_score_correction_bias"},
               {WeightRole::kW1, kimi + "experts.{e}.w1.weight"},
               {WeightRole::kW3, kimi + "experts.{e}.w3.weight"},
               {WeightRole::kW2, kimi + "experts.{e}.w2.weight"},
               {WeightRole::kLatentW1, kimi + "routed_expert_down_proj.weight"},
               {WeightRole::kLatentNorm, kimi + "routed_expert_norm.weight"},
               {WeightRole::kLatentW2, kimi + "routed_expert_up_proj.weight"}},
              Shared(kimi + "shared_experts.", "gate_proj", "up_proj",
                     "down_proj"))},
        // Qwen3-VL-MoE: mlp.gate and x·W experts, gate_up_proj [E, H, 2I]
        // (gate columns first) and down_proj [E, I, H].
        {{HfFamily::kQwen3VlMoe},
         {{WeightRole::kGate, "{p}mlp.gate.weight"},
          {WeightRole::kW1, "{p}mlp.experts.gate_up_proj", Layout::kXwHalves},
          {WeightRole::kW3, "{p}mlp.experts.gate_up_proj", Layout::kXwHalves},
          {WeightRole::kW2, "{p}mlp.experts.down_proj", Layout::kXwDown}}},
        // GraniteMoe and its shared-expert forms: block_sparse_moe.router.
        // layer, packed nn.Linear input_linear [E, 2I, H] (gate rows first)
        // and output_linear [E, H, I]; the shared MLP's input_linear
        // [2S, H] and output_linear [H, S].
        {{HfFamily::kGraniteMoe, HfFamily::kGraniteMoeShared},
         {{WeightRole::kGate, "{p}block_sparse_moe.router.layer.weight"},
          {WeightRole::kW1, "{p}block_sparse_moe.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW3, "{p}block_sparse_moe.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW2, "{p}block_sparse_moe.output_linear.weight",
           Layout::kLinearDown},
          {WeightRole::kSharedW1, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW3, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW2, "{p}shared_mlp.output_linear.weight"}}},
        // GraniteMoeSWA also in transformers v5's names, as vLLM's loader
        // reads them: block_sparse_moe.router.weight and nn.Linear experts
        // gate_up_proj [E, 2I, H] (gate rows first) / down_proj [E, H, I];
        // the shared MLP keeps its fused input_linear / output_linear.
        {{HfFamily::kGraniteMoeSwa},
         {{WeightRole::kGate, "{p}block_sparse_moe.router.layer.weight"},
          {WeightRole::kW1, "{p}block_sparse_moe.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW3, "{p}block_sparse_moe.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW2, "{p}block_sparse_moe.output_linear.weight",
           Layout::kLinearDown},
          {WeightRole::kSharedW1, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW3, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW2, "{p}shared_mlp.output_linear.weight"}},
         {{WeightRole::kGate, "{p}block_sparse_moe.router.weight"},
          {WeightRole::kW1, "{p}block_sparse_moe.experts.gate_up_proj",
           Layout::kLinearHalves},
          {WeightRole::kW3, "{p}block_sparse_moe.experts.gate_up_proj",
           Layout::kLinearHalves},
          {WeightRole::kW2, "{p}block_sparse_moe.experts.down_proj",
           Layout::kLinearDown},
          {WeightRole::kSharedW1, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW3, "{p}shared_mlp.input_linear.weight",
           Layout::kSharedLinearHalves},
          {WeightRole::kSharedW2, "{p}shared_mlp.output_linear.weight"}}},
        // MiniCPM-MoE: mlp.gate and Mixtral's w1 / w3 / w2 under mlp.
        {{HfFamily::kMinicpm},
         With(Router("{p}mlp.", "gate.e_score_correction_bias"),
              Experts("{p}mlp.", "w1", "w3", "w2"))},
        // Snowflake Arctic: Mixtral's block_sparse_moe names.
        {{HfFamily::kArctic}, block_sparse},
        // Aria: mlp.router, x·W experts fc1 [E, H, 2I] (silu of the first
        // half times the second) and fc2 [E, I, H], mlp.shared_experts.*.
        {{HfFamily::kAria},
         With(
             {{WeightRole::kGate, "{p}mlp.router.weight"},
              {WeightRole::kW1, "{p}mlp.experts.fc1.weight", Layout::kXwHalves},
              {WeightRole::kW3, "{p}mlp.experts.fc1.weight", Layout::kXwHalves},
              {WeightRole::kW2, "{p}mlp.experts.fc2.weight", Layout::kXwDown}},
             Shared("{p}mlp.shared_experts.", "gate_proj", "up_proj",
                    "down_proj"))},
        // Jamba: feed_forward.router and {gate,up,down}_proj experts.
        {{HfFamily::kJamba},
         With({{WeightRole::kGate, ff + "router.weight"}},
              Experts(ff, "gate_proj", "up_proj", "down_proj"))},
        // DBRX: ffn.router.layer and the experts' per-role parameters w1
        // (gate), v1 (up), w2 (down), no ".weight".
        {{HfFamily::kDbrx},
         {{WeightRole::kGate, "{p}ffn.router.layer.weight"},
          {WeightRole::kW1, "{p}ffn.experts.mlp.w1", Layout::kRowsLinear},
          {WeightRole::kW3, "{p}ffn.experts.mlp.v1", Layout::kRowsLinear},
          {WeightRole::kW2, "{p}ffn.experts.mlp.w2", Layout::kRowsXwDown}}},
        // Hunyuan-A13B: mlp.gate.wg, per-expert {gate,up,down}_proj (or
        // transformers v5's packed experts), mlp.shared_mlp.*.
        {{HfFamily::kHunyuanV1Moe},
         With(
             With({{WeightRole::kGate, "{p}mlp.gate.wg.weight"}},
                  Experts("{p}mlp.", "gate_proj", "up_proj", "down_proj")),
             Shared("{p}mlp.shared_mlp.", "gate_proj", "up_proj", "down_proj")),
         Packed(
             With(With({{WeightRole::kGate, "{p}mlp.gate.wg.weight"}},
                       Experts("{p}mlp.", "gate_proj", "up_proj", "down_proj")),
                  Shared("{p}mlp.shared_mlp.", "gate_proj", "up_proj",
                         "down_proj")))},
        // Kimi Linear: Kimi K3's block_sparse_moe.* names without the
        // latent projections.
        {{HfFamily::kKimiLinear},
         With(With(Router(kimi, "gate.e_score_correction_bias"),
                   Experts(kimi, "w1", "w3", "w2")),
              Shared(kimi + "shared_experts.", "gate_proj", "up_proj",
                     "down_proj"))},
        // Ling V1: DeepSeek's mlp.* names; Ling 2.0 and 3.0 keep their
        // correction bias in gate.expert_bias.
        {{HfFamily::kBailingMoe}, mlp},
        {{HfFamily::kBailingMoeV2, HfFamily::kBailingMoeV3},
         MlpNames("shared_experts.", "gate.expert_bias")},
        // Hy3 as released: the router under mlp.router.gate, its
        // correction bias mlp.expert_bias, the shared expert mlp.shared_mlp;
        // transformers v5 saves mlp.gate, mlp.e_score_correction_bias,
        // mlp.shared_experts and packed experts.
        {{HfFamily::kHyV3},
         With(MlpNames("shared_mlp.", "expert_bias"),
              {{WeightRole::kGate, "{p}mlp.router.gate.weight"}}),
         Packed(MlpNames("shared_experts.", "e_score_correction_bias"))},
        // AFMoE: the router under mlp.router.gate, its correction bias
        // mlp.expert_bias beside it.
        {{HfFamily::kAfmoe},
         With(MlpNames("shared_experts.", "expert_bias"),
              {{WeightRole::kGate, "{p}mlp.router.gate.weight"}}),
         Packed(With(MlpNames("shared_experts.", "expert_bias"),
                     {{WeightRole::kGate, "{p}mlp.router.gate.weight"}}))},
        // LFM2-MoE: feed_forward.* with w1/w3/w2 experts and expert_bias
        // beside the gate.
        {{HfFamily::kLfm2Moe},
         With(Router("{p}feed_forward.", "expert_bias"),
              Experts("{p}feed_forward.", "w1", "w3", "w2"))},
        // EXAONE-MoE: DeepSeek's mlp.* names, the correction bias in the
        // gate as transformers keeps it.
        {{HfFamily::kExaoneMoe}, mlp, Packed(mlp)},
        // PhiMoE: Mixtral's block_sparse_moe names.
        {{HfFamily::kPhimoe}, block_sparse, Packed(mlp)},
        // LongCat-Flash: mlp.router.classifier over the E + Z router rows
        // (zero experts have no tensors), its correction bias beside it.
        {{HfFamily::kLongcatFlash},
         With({{WeightRole::kGate, "{p}mlp.router.classifier.weight"},
               {WeightRole::kRouterBias, "{p}mlp.router.classifier.bias"},
               {WeightRole::kExpertBias,
                "{p}mlp.router.e_score_correction_bias"}},
              Experts("{p}mlp.", "gate_proj", "up_proj", "down_proj"))},
        // Cohere2-MoE: DeepSeek-style mlp.* with mlp.shared_experts.
        {{HfFamily::kCohere2Moe}, mlp, Packed(mlp)},
        // JetMoE: mlp.router.layer, nn.Linear-packed experts and the
        // layer's output bias mlp.bias.
        {{HfFamily::kJetMoe},
         {{WeightRole::kGate, "{p}mlp.router.layer.weight"},
          {WeightRole::kW1, "{p}mlp.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW3, "{p}mlp.input_linear.weight",
           Layout::kLinearHalves},
          {WeightRole::kW2, "{p}mlp.output_linear.weight", Layout::kLinearDown},
          {WeightRole::kOutputBias, "{p}mlp.bias"}}},
        // Step-3.5 and Step-3: moe.* with (3.5) the correction bias
        // router_bias and each role's experts packed as nn.Linear [E, I, H]
        // / [E, H, I]; the share_expert beside moe., at the layer level.
        {{HfFamily::kStep3p5, HfFamily::kStep3Text},
         With(
             {{WeightRole::kGate, "{p}moe.gate.weight"},
              {WeightRole::kExpertBias, "{p}moe.router_bias"},
              {WeightRole::kW1, "{p}moe.gate_proj.weight", Layout::kLinearRole},
              {WeightRole::kW3, "{p}moe.up_proj.weight", Layout::kLinearRole},
              {WeightRole::kW2, "{p}moe.down_proj.weight",
               Layout::kLinearDown}},
             Shared("{p}share_expert.", "gate_proj", "up_proj", "down_proj"))},
        // Grok-1: moe_block.gate and the experts' linear (gate), linear_v
        // (up) and linear_1 (down).
        {{HfFamily::kGrok1},
         With({{WeightRole::kGate, "{p}moe_block.gate.weight"}},
              Experts("{p}moe_block.", "linear", "linear_v", "linear_1"))},
    };
  }();
  return *tables;
}

// Mistral's consolidated names (mistral-inference's module names, as vLLM's
// Mixtral and MistralLarge3ForCausalLM load them), under "layers.{L}." and
// one tensor per expert: the families params.json is read as
// (mistral_params.cc) and nothing else.
const std::vector<std::pair<HfFamily, NameTable>>& ConsolidatedTables() {
  static const auto* tables = [] {
    // Mixtral: the MoE block is the layer's feed_forward, its router
    // feed_forward.gate, its experts w1 (gate), w3 (up), w2 (down).
    const std::string ff = "{p}feed_forward.";
    // Mistral-Large-3: gate, experts and shared_experts sit at the layer
    // level (feed_forward.* is a dense layer's MLP); no correction bias.
    return new std::vector<std::pair<HfFamily, NameTable>>{
        {HfFamily::kMixtral, With({{WeightRole::kGate, ff + "gate.weight"}},
                                  Experts(ff, "w1", "w3", "w2"))},
        {HfFamily::kDeepseekV3,
         With(With({{WeightRole::kGate, "{p}gate.weight"}},
                   Experts("{p}", "w1", "w3", "w2")),
              Shared("{p}shared_experts.", "w1", "w3", "w2"))},
    };
  }();
  return *tables;
}

const NameTable* ConsolidatedOf(HfFamily family) {
  for (const auto& [f, table] : ConsolidatedTables()) {
    if (f == family) return &table;
  }
  return nullptr;
}

const FamilyNames* NamesOf(HfFamily base) {
  for (const FamilyNames& names : NameTables()) {
    for (HfFamily f : names.families) {
      if (f == base) return &names;
    }
  }
  return nullptr;
}

// The location `entry` gives `role` of `expert` in the layer under prefix
// `p`: the template filled in, and the slice its layout kind cuts.
HfTensorLocation Interpret(const RoleName& entry, const std::string& p,
                           const MoeLayerConfig& c, WeightRole role,
                           int64_t expert) {
  HfTensorLocation loc;
  loc.name = absl::StrReplaceAll(entry.name,
                                 {{"{p}", p}, {"{e}", absl::StrCat(expert)}});
  if (entry.layout == Layout::kOwn) return loc;
  const int64_t E = c.num_experts, H = c.hidden, I = c.inter,
                S = c.shared_inter;
  const bool gate_half = role == WeightRole::kW1 || role == WeightRole::kB1 ||
                         role == WeightRole::kSharedW1;
  loc.fused = true;
  loc.expert = expert;
  loc.out = I;
  switch (entry.layout) {
    case Layout::kXwHalves:
      loc.fused_shape = {E, H, 2 * I};
      loc.col0 = gate_half ? 0 : I;
      break;
    case Layout::kXwInterleaved:
      loc.fused_shape = {E, H, 2 * I};
      loc.col0 = gate_half ? 0 : 1;
      loc.col_step = 2;
      break;
    case Layout::kXwDown:
      loc.fused_shape = {E, I, H};
      loc.out = H;
      break;
    case Layout::kBiasInterleaved:
      loc.fused_shape = {E, 2 * I};
      loc.col0 = gate_half ? 0 : 1;
      loc.col_step = 2;
      break;
    case Layout::kBiasDown:
      loc.fused_shape = {E, H};
      loc.out = H;
      break;
    case Layout::kLinearHalves:
      loc.fused_shape = {E, 2 * I, H};
      loc.col0 = gate_half ? 0 : I;
      loc.linear = true;
      break;
    case Layout::kLinearDown:
      loc.fused_shape = {E, H, I};
      loc.out = H;
      loc.linear = true;
      break;
    case Layout::kSharedLinearHalves:
      loc.fused_shape = {1, 2 * S, H};
      loc.stored_shape = {2 * S, H};
      loc.expert = 0;
      loc.col0 = gate_half ? 0 : S;
      loc.out = S;
      loc.linear = true;
      break;
    case Layout::kRowsLinear:
      loc.fused_shape = {E, I, H};
      loc.stored_shape = {E * I, H};
      loc.linear = true;
      break;
    case Layout::kRowsXwDown:
      loc.fused_shape = {E, I, H};
      loc.stored_shape = {E * I, H};
      loc.out = H;
      break;
    case Layout::kLinearRole:
      loc.fused_shape = {E, I, H};
      loc.linear = true;
      break;
    case Layout::kOwn:
      break;
  }
  return loc;
}

}  // namespace

HfNameTables HfFamilyNames(HfFamily family) {
  HfNameTables out;
  // The tables HfLocate reads: the family's own, else its base family's.
  const FamilyNames* names = NamesOf(family);
  if (names == nullptr) names = NamesOf(HfBaseFamily(family));
  if (names == nullptr) return out;
  for (const auto& [from, to] : {std::pair{&names->per_expert, &out.per_expert},
                                 std::pair{&names->packed, &out.packed}}) {
    for (const RoleName& entry : *from) {
      to->push_back({entry.role, entry.name, LayoutName(entry.layout)});
    }
  }
  return out;
}

std::vector<std::string> HfLayoutNames() {
  std::vector<std::string> names;
  for (Layout layout : AllLayouts()) names.push_back(LayoutName(layout));
  return names;
}

absl::Status AddHfFamilyNames(HfFamily family, const HfNameTables& names) {
  FamilyNames added{{family}, {}, {}};
  for (const auto& [from, to, label] :
       {std::tuple{&names.per_expert, &added.per_expert, "per_expert"},
        std::tuple{&names.packed, &added.packed, "packed"}}) {
    for (const HfRoleName& entry : *from) {
      std::optional<Layout> layout;
      for (Layout l : AllLayouts()) {
        if (entry.layout == LayoutName(l)) layout = l;
      }
      if (!layout.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("names.", label, " ", WeightRoleName(entry.role),
                         ": layout '", entry.layout, "' is not one of ",
                         absl::StrJoin(HfLayoutNames(), ", ")));
      }
      for (const RoleName& seen : *to) {
        if (seen.role == entry.role) {
          return absl::InvalidArgumentError(
              absl::StrCat("names.", label, ": role ",
                           WeightRoleName(entry.role), " is listed twice"));
        }
      }
      to->push_back({entry.role, entry.name, *layout});
    }
  }
  NameTables().push_back(std::move(added));
  return absl::OkStatus();
}

HfTensorLocation HfLocate(HfFamily described, const MoeLayerConfig& config,
                          int64_t layer, WeightRole role, int64_t expert,
                          HfExpertLayout layout) {
  // The table the layout names, and the prefix its names sit under.
  const NameTable* table = nullptr;
  std::string prefix;
  if (layout == HfExpertLayout::kConsolidated) {
    table = ConsolidatedOf(described);
    prefix = absl::StrCat("layers.", layer, ".");
  } else {
    // A family described as another's keeps that one's names unless it has
    // its own (Qwen3-VL-MoE stores Qwen3-MoE's experts fused).
    const FamilyNames* names = NamesOf(described);
    if (names == nullptr) names = NamesOf(HfBaseFamily(described));
    if (names != nullptr) {
      table = layout == HfExpertLayout::kPacked && !names->packed.empty()
                  ? &names->packed
                  : &names->per_expert;
      prefix = HfLayerPrefix(described, layer);
    }
  }
  if (table == nullptr) return {};
  for (const RoleName& entry : *table) {
    if (entry.role == role) {
      return Interpret(entry, prefix, config, role, expert);
    }
  }
  // A role the family has no tensor for (a non-gated expert's w1).
  return {};
}

std::string HfTensorName(HfFamily family, int64_t layer, WeightRole role,
                         int64_t expert, HfExpertLayout layout) {
  return HfLocate(family, MoeLayerConfig{}, layer, role, expert, layout).name;
}

}  // namespace moe

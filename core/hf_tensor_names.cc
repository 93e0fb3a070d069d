// Each family's tensor names (golden README, "Hugging Face families"), and
// where fused or packed expert tensors keep a role's rows.
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/hf_config.h"

namespace moe {
namespace {

bool IsLlama4(HfFamily f) {
  return f == HfFamily::kLlama4 || f == HfFamily::kLlama4Text;
}

// block_sparse_moe.* with w1/w3/w2 experts (Mixtral, MiniMax-M2).
std::string BlockSparseName(const std::string& p, WeightRole role,
                            int64_t expert) {
  const std::string m = p + "block_sparse_moe.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      // MiniMax-M2 keeps the correction bias beside the gate, not in it.
      return m + "e_score_correction_bias";
    case WeightRole::kW1:
      return absl::StrCat(m, "experts.", expert, ".w1.weight");
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".w3.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".w2.weight");
    // The 2026 roles in the generic form (moe_* extension keys).
    case WeightRole::kRouterBias:
      return m + "gate.bias";
    case WeightRole::kB1:
      return absl::StrCat(m, "experts.", expert, ".w1.bias");
    case WeightRole::kB3:
      return absl::StrCat(m, "experts.", expert, ".w3.bias");
    case WeightRole::kB2:
      return absl::StrCat(m, "experts.", expert, ".w2.bias");
    case WeightRole::kTid2Eid:
      return m + "gate.tid2eid";
    default:
      return "";
  }
}

HfTensorLocation Fused(std::string name, std::vector<int64_t> shape,
                       int64_t expert, int64_t col0, int64_t step,
                       int64_t out) {
  HfTensorLocation loc;
  loc.name = std::move(name);
  loc.fused = true;
  loc.fused_shape = std::move(shape);
  loc.expert = expert;
  loc.col0 = col0;
  loc.col_step = step;
  loc.out = out;
  return loc;
}

// gpt-oss: router with bias; gate and up interleaved on the 2I axis (2j
// gate j, 2j+1 up j) of the x·W tensor and of its bias.
HfTensorLocation GptOssLocation(const std::string& p, const MoeLayerConfig& c,
                                WeightRole role, int64_t expert) {
  const std::string m = p + "mlp.";
  const int64_t E = c.num_experts, H = c.hidden, I = c.inter;
  switch (role) {
    case WeightRole::kGate:
      return {m + "router.weight"};
    case WeightRole::kRouterBias:
      return {m + "router.bias"};
    case WeightRole::kW1:
    case WeightRole::kW3:
      return Fused(m + "experts.gate_up_proj", {E, H, 2 * I}, expert,
                   role == WeightRole::kW1 ? 0 : 1, 2, I);
    case WeightRole::kW2:
      return Fused(m + "experts.down_proj", {E, I, H}, expert, 0, 1, H);
    case WeightRole::kB1:
    case WeightRole::kB3:
      return Fused(m + "experts.gate_up_proj_bias", {E, 2 * I}, expert,
                   role == WeightRole::kB1 ? 0 : 1, 2, I);
    case WeightRole::kB2:
      return Fused(m + "experts.down_proj_bias", {E, H}, expert, 0, 1, H);
    default:
      return {};
  }
}

// DeepSeek-V4's upstream names: layers.{L}.ffn.*, w1/w3/w2 linears.
std::string DeepseekV4Name(const std::string& p, WeightRole role,
                           int64_t expert) {
  const std::string m = p + "ffn.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      return m + "gate.bias";  // the correction bias, for choosing only
    case WeightRole::kTid2Eid:
      return m + "gate.tid2eid";
    case WeightRole::kW1:
      return absl::StrCat(m, "experts.", expert, ".w1.weight");
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".w3.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".w2.weight");
    case WeightRole::kSharedW1:
      return m + "shared_experts.w1.weight";
    case WeightRole::kSharedW3:
      return m + "shared_experts.w3.weight";
    case WeightRole::kSharedW2:
      return m + "shared_experts.w2.weight";
    default:
      return "";
  }
}

HfTensorLocation Llama4Location(const std::string& p, const MoeLayerConfig& c,
                                WeightRole role, int64_t expert) {
  const std::string m = p + "feed_forward.";
  HfTensorLocation loc;
  const int64_t E = c.num_experts, H = c.hidden, I = c.inter;
  switch (role) {
    case WeightRole::kGate:
      loc.name = m + "router.weight";
      return loc;
    case WeightRole::kW1:
    case WeightRole::kW3:
      // gate_up_proj [E, H, 2I], x·W: gate = columns [0, I), up = [I, 2I).
      loc.name = m + "experts.gate_up_proj";
      loc.fused = true;
      loc.fused_shape = {E, H, 2 * I};
      loc.expert = expert;
      loc.col0 = role == WeightRole::kW1 ? 0 : I;
      loc.out = I;
      return loc;
    case WeightRole::kW2:
      // down_proj [E, I, H], x·W: w2[h][i] = t[e][i][h].
      loc.name = m + "experts.down_proj";
      loc.fused = true;
      loc.fused_shape = {E, I, H};
      loc.expert = expert;
      loc.out = H;
      return loc;
    case WeightRole::kSharedW1:
      loc.name = m + "shared_expert.gate_proj.weight";
      return loc;
    case WeightRole::kSharedW3:
      loc.name = m + "shared_expert.up_proj.weight";
      return loc;
    case WeightRole::kSharedW2:
      loc.name = m + "shared_expert.down_proj.weight";
      return loc;
    default:
      return loc;
  }
}

// mlp.* with {gate,up,down}_proj experts (Qwen, OLMoE, DeepSeek, GLM, Kimi).
std::string MlpName(HfFamily f, const std::string& p, WeightRole role,
                    int64_t expert) {
  const std::string m = p + "mlp.";
  const bool qwen_shared = f == HfFamily::kQwen2Moe ||
                           f == HfFamily::kQwen3Next ||
                           f == HfFamily::kQwen35Moe;
  const std::string shared = qwen_shared ? "shared_expert." : "shared_experts.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      // ERNIE 4.5 keeps its correction bias [1, E] in moe_statics.
      return f == HfFamily::kErnie45Moe
                 ? m + "moe_statics.e_score_correction_bias"
                 : m + "gate.e_score_correction_bias";
    case WeightRole::kW1:
      return absl::StrCat(m, "experts.", expert, ".gate_proj.weight");
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".up_proj.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".down_proj.weight");
    case WeightRole::kSharedW1:
      return m + shared + "gate_proj.weight";
    case WeightRole::kSharedW3:
      return m + shared + "up_proj.weight";
    case WeightRole::kSharedW2:
      return m + shared + "down_proj.weight";
    case WeightRole::kSharedGate:
      return m + "shared_expert_gate.weight";
    // The 2026 roles in the generic form (moe_* extension keys).
    case WeightRole::kRouterBias:
      return m + "gate.bias";
    case WeightRole::kB1:
      return absl::StrCat(m, "experts.", expert, ".gate_proj.bias");
    case WeightRole::kB3:
      return absl::StrCat(m, "experts.", expert, ".up_proj.bias");
    case WeightRole::kB2:
      return absl::StrCat(m, "experts.", expert, ".down_proj.bias");
    case WeightRole::kTid2Eid:
      return m + "gate.tid2eid";
    default:
      return "";
  }
}

// transformers v5's packed experts (HfExpertLayout::kPacked): nn.Linear
// weights gate_up_proj [E, 2I, H] (gate rows 0..I-1, up rows I..2I-1) and
// down_proj [E, H, I], each expert's slice read as it lies. The other roles
// keep their mlp.* names (Mixtral's block_sparse_moe. became mlp. in v5).
HfTensorLocation PackedLocation(HfFamily f, const std::string& p,
                                const MoeLayerConfig& c, WeightRole role,
                                int64_t expert) {
  const std::string m = p + "mlp.";
  const int64_t E = c.num_experts, H = c.hidden, I = c.inter;
  HfTensorLocation loc;
  switch (role) {
    case WeightRole::kW1:
    case WeightRole::kW3:
      loc = Fused(m + "experts.gate_up_proj", {E, 2 * I, H}, expert,
                  role == WeightRole::kW1 ? 0 : I, 1, I);
      break;
    case WeightRole::kW2:
      loc = Fused(m + "experts.down_proj", {E, H, I}, expert, 0, 1, H);
      break;
    default:
      loc.name = MlpName(f, p, role, expert);
      return loc;
  }
  loc.linear = true;
  return loc;
}

// Families whose experts transformers v5 may save packed: those with one
// tensor per role and expert under mlp.* or block_sparse_moe.*.
bool MayBePacked(HfFamily f) {
  return !IsLlama4(f) && f != HfFamily::kGptOss && f != HfFamily::kDeepseekV4 &&
         f != HfFamily::kNemotronH && f != HfFamily::kGemma4 &&
         f != HfFamily::kKimiK3;
}

// Nemotron 3: backbone.layers.{L}.mixer.*, non-gated experts (up / down
// only), LatentMoE's fc1 / fc2_latent_proj with their mlp_bias biases.
std::string NemotronHName(const std::string& p, WeightRole role,
                          int64_t expert) {
  const std::string m = p + "mixer.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      return m + "gate.e_score_correction_bias";
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".up_proj.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".down_proj.weight");
    case WeightRole::kSharedW3:
      return m + "shared_experts.up_proj.weight";
    case WeightRole::kSharedW2:
      return m + "shared_experts.down_proj.weight";
    case WeightRole::kLatentW1:
      return m + "fc1_latent_proj.weight";
    case WeightRole::kLatentW2:
      return m + "fc2_latent_proj.weight";
    case WeightRole::kLatentB1:
      return m + "fc1_latent_proj.bias";
    case WeightRole::kLatentB2:
      return m + "fc2_latent_proj.bias";
    default:
      return "";  // no gate proj (kW1, kSharedW1): the experts are non-gated
  }
}

// Gemma 4: router.* with its scales, the experts always packed as
// nn.Linear weights (gate_up_proj [E, 2I, H], down_proj [E, H, I]), the
// dense MLP as the shared expert, and the four norms around the branches.
HfTensorLocation Gemma4Location(const std::string& p, const MoeLayerConfig& c,
                                WeightRole role, int64_t expert) {
  const int64_t E = c.num_experts, H = c.hidden, I = c.inter;
  HfTensorLocation loc;
  switch (role) {
    case WeightRole::kW1:
    case WeightRole::kW3:
      loc = Fused(p + "experts.gate_up_proj", {E, 2 * I, H}, expert,
                  role == WeightRole::kW1 ? 0 : I, 1, I);
      loc.linear = true;
      return loc;
    case WeightRole::kW2:
      loc = Fused(p + "experts.down_proj", {E, H, I}, expert, 0, 1, H);
      loc.linear = true;
      return loc;
    case WeightRole::kGate:
      loc.name = p + "router.proj.weight";
      return loc;
    case WeightRole::kGateScale:
      loc.name = p + "router.scale";
      return loc;
    case WeightRole::kPerExpertScale:
      loc.name = p + "router.per_expert_scale";
      return loc;
    case WeightRole::kSharedW1:
      loc.name = p + "mlp.gate_proj.weight";
      return loc;
    case WeightRole::kSharedW3:
      loc.name = p + "mlp.up_proj.weight";
      return loc;
    case WeightRole::kSharedW2:
      loc.name = p + "mlp.down_proj.weight";
      return loc;
    // The norms multiply as stored (golden README, branch_norms).
    case WeightRole::kSharedInNorm:
      loc.name = p + "pre_feedforward_layernorm.weight";
      return loc;
    case WeightRole::kSharedOutNorm:
      loc.name = p + "post_feedforward_layernorm_1.weight";
      return loc;
    case WeightRole::kExpertsInNorm:
      loc.name = p + "pre_feedforward_layernorm_2.weight";
      return loc;
    case WeightRole::kExpertsOutNorm:
      loc.name = p + "post_feedforward_layernorm_2.weight";
      return loc;
    default:
      return loc;
  }
}

// Kimi K3: block_sparse_moe.* with w1/w3/w2 experts, {gate,up,down}_proj
// shared experts and the latent projections routed_expert_down_proj (H ->
// latent), routed_expert_norm and routed_expert_up_proj (latent -> H).
std::string KimiK3Name(const std::string& p, WeightRole role, int64_t expert) {
  const std::string m = p + "block_sparse_moe.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      return m + "gate.e_score_correction_bias";
    case WeightRole::kW1:
      return absl::StrCat(m, "experts.", expert, ".w1.weight");
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".w3.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".w2.weight");
    case WeightRole::kSharedW1:
      return m + "shared_experts.gate_proj.weight";
    case WeightRole::kSharedW3:
      return m + "shared_experts.up_proj.weight";
    case WeightRole::kSharedW2:
      return m + "shared_experts.down_proj.weight";
    case WeightRole::kLatentW1:
      return m + "routed_expert_down_proj.weight";
    case WeightRole::kLatentNorm:
      return m + "routed_expert_norm.weight";
    case WeightRole::kLatentW2:
      return m + "routed_expert_up_proj.weight";
    default:
      return "";
  }
}

}  // namespace

std::string HfLayerPrefix(HfFamily described, int64_t layer) {
  // A family described as another's keeps that one's names.
  const HfFamily family = HfBaseFamily(described);
  if (family == HfFamily::kLlama4) {
    return absl::StrCat("language_model.model.layers.", layer, ".");
  }
  if (family == HfFamily::kDeepseekV4)
    return absl::StrCat("layers.", layer, ".");
  if (family == HfFamily::kQwen35Moe || family == HfFamily::kGemma4) {
    return absl::StrCat("model.language_model.layers.", layer, ".");
  }
  if (family == HfFamily::kNemotronH) {
    return absl::StrCat("backbone.layers.", layer, ".");
  }
  if (family == HfFamily::kKimiK3) {
    return absl::StrCat("language_model.model.layers.", layer, ".");
  }
  return absl::StrCat("model.layers.", layer, ".");
}

HfTensorLocation HfLocate(HfFamily described, const MoeLayerConfig& config,
                          int64_t layer, WeightRole role, int64_t expert,
                          HfExpertLayout layout) {
  const HfFamily family = HfBaseFamily(described);
  const std::string p = HfLayerPrefix(family, layer);
  if (layout == HfExpertLayout::kPacked && MayBePacked(family)) {
    return PackedLocation(family, p, config, role, expert);
  }
  if (IsLlama4(family)) return Llama4Location(p, config, role, expert);
  if (family == HfFamily::kGptOss) {
    return GptOssLocation(p, config, role, expert);
  }
  if (family == HfFamily::kGemma4) {
    return Gemma4Location(p, config, role, expert);
  }
  HfTensorLocation loc;
  if (family == HfFamily::kNemotronH) {
    loc.name = NemotronHName(p, role, expert);
    return loc;
  }
  if (family == HfFamily::kKimiK3) {
    loc.name = KimiK3Name(p, role, expert);
    return loc;
  }
  if (family == HfFamily::kDeepseekV4) {
    loc.name = DeepseekV4Name(p, role, expert);
    return loc;
  }
  if (family == HfFamily::kMixtral || family == HfFamily::kMinimaxM2) {
    loc.name = BlockSparseName(p, role, expert);
  } else {
    loc.name = MlpName(family, p, role, expert);
  }
  return loc;
}

std::string HfTensorName(HfFamily family, int64_t layer, WeightRole role,
                         int64_t expert, HfExpertLayout layout) {
  return HfLocate(family, MoeLayerConfig{}, layer, role, expert, layout).name;
}

}  // namespace moe

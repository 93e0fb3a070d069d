// Hugging Face config.json -> MoE layer ids, routing options and tensor
// names, for the families in docs (README "Supported model families") and
// the golden README's "Hugging Face families" table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_source.h"

namespace moe {

enum class HfFamily {
  kMixtral,
  kQwen2Moe,
  kQwen3Moe,
  kOlmoe,
  kDeepseekV2,
  kDeepseekV3,
  kGlm4Moe,
  kGlmMoeDsa,    // GLM-5: glm4_moe's MoE under its own model_type
  kMimoV2Flash,  // MiMo-V2-Flash: deepseek_v3's MoE, no shared expert
  kKimiK2,
  kQwen35Moe,  // Qwen3.5 / 3.6 MoE: text_config, model.language_model.
  kQwen3Next,
  kMinimaxM2,
  kLlama4,      // Llama4ForConditionalGeneration: text_config, language_model.
  kLlama4Text,  // Llama4ForCausalLM
  kErnie45Moe,
  kGptOss,            // released MXFP4 *_blocks/*_scales or dequantised bf16
  kDeepseekV4,        // fp4/fp8 with E8M0 .scale or unquantised; no "model."
  kNemotronH,         // Nemotron 3: backbone.layers.{L}.mixer., non-gated relu2
  kGemma4,            // Gemma 4: text_config, router pre-norm, branch norms
  kKimiK3,            // Kimi K3: text_config, LatentMoE with norm, SiTU
  kFlexOlmo,          // FlexOlmo: olmoe's MoE
  kMellum,            // Mellum: qwen3_moe's MoE, layers by mlp_layer_types
  kMinimax,           // MiniMax-Text-01 / M1: mixtral's MoE
  kQwen3VlMoe,        // Qwen3-VL-MoE: qwen3_moe's MoE, text_config, fused x·W
  kGraniteMoe,        // GraniteMoe: router.layer, packed input/output_linear
  kArctic,            // Snowflake Arctic: mixtral's MoE by moe_layer_frequency
  kAria,              // Aria: text_config, fused x·W fc1/fc2, shared experts
  kJamba,             // Jamba: feed_forward.*, expert_layer_period / offset
  kGraniteMoeShared,  // GraniteMoe with a fused shared_mlp
  kGraniteMoeHybrid,  // Granite 4.0-H: GraniteMoeShared's MoE, Mamba host-side
  kDbrx,              // DBRX: transformer.blocks., ffn_config, packed rows
  kHunyuanV1Moe,      // Hunyuan-A13B: uniform per-layer lists, mlp.gate.wg
  kQwen3OmniMoe,      // Qwen3-Omni: the thinker's qwen3_moe, nested config
  // DeepSeek-style gates described by difference or by their own keys.
  kDeepseek,      // deepseek-moe-16b: deepseek_v2's MoE without groups
  kDeepseekV32,   // DeepSeek-V3.2: deepseek_v3's MoE
  kDots1,         // dots.llm1: deepseek_v3's MoE, layers by first dense
  kGlm4MoeLite,   // GLM-4.7-Flash: glm4_moe's MoE, mlp_layer_types
  kSolarOpen,     // Solar Open: glm4_moe's MoE on every layer
  kKimiLinear,    // Kimi Linear: block_sparse_moe.*, Kimi K3's keys
  kBailingMoe,    // Ling V1 (BailingMoeForCausalLM): softmax
  kBailingMoeV2,  // Ling 2.0 (BailingMoeV2ForCausalLM), model_type
                  // bailing_moe too: sigmoid, gate.expert_bias, groups
  kGlm4vMoe,      // GLM-4.5V: text_config, model.language_model.
  kKimiVl,        // Kimi-VL: text_config, language_model.model.
  kKimiK25,       // Kimi K2.5: text_config, language_model.model.
  kAfmoe,         // AFMoE (Arcee Trinity): mlp.router.gate, mlp.expert_bias
  kLfm2Moe,       // LFM2-MoE: feed_forward.*, w1/w3/w2, expert_bias
  kExaoneMoe,     // K-EXAONE: DeepSeek-V3's router, swiglu_limits
  // Router-side pieces of 2026d: sparsemixer, zero experts, output terms.
  kPhimoe,        // Phi-3.5-MoE: sparsemixer routing
  kLongcatFlash,  // LongCat-Flash: zero-computation (identity) experts
  kCohere2Moe,    // Cohere2-MoE: shared branch summed or averaged
  kJetMoe,        // JetMoE: packed experts, output bias
  // Step-3.5-Flash: per-role packed [E, I, H] experts, a layer-level
  // share_expert, per-layer swiglustep limits.
  kStep3p5,
  // Grok-1 (hpcai-tech's PyTorch conversion): soft-capped router logits,
  // GELU (erf) experts under moe_block.
  kGrok1,
  // Step-3 (step3_text): Step-3.5's layout and layer rule with a plain
  // softmax router.
  kStep3Text,
  // ERNIE-4.5-VL as released: ERNIE 4.5's MoE with a text and a vision
  // expert set per layer, chosen per token by its token type.
  kErnie45VlMoe,
  // Hy3 (hy_v3): sigmoid, mlp.expert_bias for the choice, always
  // renormalised, x router_scaling_factor; mlp.router.gate, mlp.shared_mlp.
  kHyV3,
  // Ling-3.0 (BailingMoeV3ForCausalLM): Ling 2.0's gate, its own shared
  // width, per-layer swiglustep limits.
  kBailingMoeV3,
  // Multimodal wrappers over a language model whose MoE exists: its keys
  // under text_config (or llm_config), its layers under the wrapper's
  // prefix.
  kStep3Vl,        // Step3-VL: step3_text under text_config
  kMinimaxVl01,    // MiniMax-VL-01: MiniMax-Text-01 under text_config
  kInternS1,       // Intern-S1: qwen3_moe under text_config
  kInternVl,       // InternVL (transformers): qwen3_moe under text_config
  kInternVlChat,   // InternVLChatModel: qwen3_moe under llm_config
  kOvis26Moe,      // Ovis2.6-MoE: qwen3_moe under llm_config, llm.model.
  kLfm2Vl,         // LFM2-VL: lfm2_moe under text_config
  kGraniteMoeSwa,  // GraniteMoeSWA: GraniteMoeShared's MoE, v4 or v5 names
  kMinicpm,        // MiniCPM-MoE: Mixtral's MoE as mlp.experts.{e}.w1/w3/w2
  kGemma4Text,     // Gemma4ForCausalLM: Gemma 4's MoE block, text-only save
};

// Every family, in the order of the table above.
const std::vector<HfFamily>& AllHfFamilies();

// How a checkpoint stores its routed experts. Families that name one tensor
// per role and expert (Mixtral, Qwen, ...) are saved by transformers v5 with
// all experts packed as nn.Linear weights: mlp.experts.gate_up_proj [E, 2I,
// H] (each expert's gate rows over its up rows) and mlp.experts.down_proj
// [E, H, I]; the checkpoint reader tells the two apart by the tensors
// present. Mistral's own releases (params.json, consolidated*.safetensors)
// name every tensor their own way, under layers.{L}. (consolidated tables in
// hf_tensor_names.cc; Mixtral and Mistral-Large-3 only); the checkpoint reader
// chooses that layout by the config file it finds (mistral_params.h).
enum class HfExpertLayout { kPerExpert, kPacked, kConsolidated };

struct HfModelSpec {
  HfFamily family = HfFamily::kMixtral;
  ModelInfo info;
  // DeepSeek-V3 FP8 checkpoints: [rows, cols] of a weight_scale_inv block.
  int64_t fp8_block_rows = 128;
  int64_t fp8_block_cols = 128;
  // The config key that gives the LatentMoE width (info.layer.latent), ""
  // when the family has none: named when the tensors disagree with it.
  std::string latent_key;
  // quantization_config.quant_method, "" when the checkpoint has none.
  std::string quant_method;
  // Set by the checkpoint reader from the tensors it finds (kConsolidated
  // by ParseMistralParams).
  HfExpertLayout layout = HfExpertLayout::kPerExpert;
};

// Parses config.json. Besides each family's own keys it honours three
// extension keys for options no HF family expresses: "moe_capacity_factor"
// (number), "moe_routing" ("token_choice" | "expert_choice") and
// "moe_score_before_experts" (bool). `label` prefixes error messages.
// An unknown model_type, an `architectures` entry that is not its family's,
// or a quantisation method the engine cannot read is refused, naming what
// was found and what is supported: never served as a near family.
absl::StatusOr<HfModelSpec> ParseHfConfig(absl::string_view json_text,
                                          absl::string_view label);

// The prefix of decoder layer `layer`'s tensors ("model.layers.3.").
std::string HfLayerPrefix(HfFamily family, int64_t layer);

// Where a role's weight lives in a checkpoint. Most families store one
// [out, in] tensor per role and expert. Llama 4 and gpt-oss store all
// experts fused for x·W: gate_up_proj [E, H, 2I] and down_proj [E, I, H];
// the role's [out, in] weight is then w[o][i] = t[expert][i][col0 + o *
// col_step], o < out. A fused bias [E, C] (gpt-oss) gives the vector
// b[o] = t[expert][col0 + o * col_step]. The packed layout (HfExpertLayout)
// stores nn.Linear weights [E, C, in] instead (`linear`): w[o][i] =
// t[expert][col0 + o * col_step][i].
struct HfTensorLocation {
  std::string name;
  bool fused = false;
  bool linear = false;
  // [E, in, C], [E, C, in] when `linear` or, for a bias, [E, C].
  std::vector<int64_t> fused_shape;
  // The shape the tensor is stored in when it is `fused_shape` with axes
  // merged (the same values in the same order): Granite's fused shared
  // input_linear [2S, H] is read as [1, 2S, H]. Empty: fused_shape.
  std::vector<int64_t> stored_shape;
  int64_t expert = 0;
  int64_t col0 = 0;
  int64_t col_step = 1;
  int64_t out = 0;
};

HfTensorLocation HfLocate(HfFamily family, const MoeLayerConfig& config,
                          int64_t layer, WeightRole role, int64_t expert,
                          HfExpertLayout layout = HfExpertLayout::kPerExpert);

// The checkpoint tensor name of a role in MoE layer `layer` (the fused
// tensor's name where the family fuses experts).
std::string HfTensorName(HfFamily family, int64_t layer, WeightRole role,
                         int64_t expert,
                         HfExpertLayout layout = HfExpertLayout::kPerExpert);

// The config.json model_type of a family.
const char* HfFamilyName(HfFamily family);
// The family whose config reader and tensor names `family` shares: itself,
// unless its table entry describes it as another's (GLM-5 as glm4_moe).
HfFamily HfBaseFamily(HfFamily family);
// "mixtral, qwen2_moe, ...": for error messages.
std::string SupportedHfFamilies();

}  // namespace moe

// The family table: one description per Hugging Face MoE family
// (hf_config_family.h), read by the one interpreter (hf_config_description.cc).
#include <algorithm>
#include <utility>

#include "core/hf_config_family.h"
#include "core/hf_config_rules.h"

namespace moe {
namespace {

constexpr ScoreName kSoftmaxOrSigmoid[] = {{"softmax", ScoreFunc::kSoftmax},
                                           {"sigmoid", ScoreFunc::kSigmoid}};
constexpr ScoreName kSigmoidOrSoftmax[] = {{"sigmoid", ScoreFunc::kSigmoid},
                                           {"softmax", ScoreFunc::kSoftmax}};
constexpr ScoreName kSqrtSoftplusOnly[] = {
    {"sqrtsoftplus", ScoreFunc::kSqrtSoftplus}};
constexpr ScoreName kSoftmaxOnly[] = {{"softmax", ScoreFunc::kSoftmax}};
constexpr ScoreName kSigmoidOnly[] = {{"sigmoid", ScoreFunc::kSigmoid}};
// Cohere2-MoE's expert_selection_fn: softmax over the k largest logits, or
// their sigmoids; and its shared_expert_combination_strategy.
constexpr ScoreName kTopkSoftmaxOrSigmoid[] = {
    {"softmax", ScoreFunc::kTopkSoftmax}, {"sigmoid", ScoreFunc::kSigmoid}};
constexpr ScaleName kSumOrAverage[] = {{"sum", 1.0f}, {"average", 0.5f}};

// DeepSeek's gate keys, shared by V2, V3 and GLM-4.5: scoring_func,
// topk_method with n_group / topk_group, norm_topk_prob (a renorm of one
// weight is none) and routed_scaling_factor; experts of
// moe_intermediate_size, n_shared_experts of them shared.
MoeDescription DeepseekMoe(const char* scoring, const char* method,
                           RenormAndScale renorm_and_scale,
                           MoeLayerRule layers) {
  return {
      .experts = {"n_routed_experts"},
      .inter = {"moe_intermediate_size"},
      .shared = {.rule = SharedExpertRule::kCountTimesInter,
                 .key = {"n_shared_experts", 0}},
      .score_key = {"scoring_func", scoring, kSoftmaxOrSigmoid},
      .route_norm = {"norm_topk_prob", false},
      .route_norm_needs_two = true,
      .route_scale = {"routed_scaling_factor", 1.0},
      .renorm_and_scale = renorm_and_scale,
      .groups = {.rule = GroupRule::kDeepseekTopkMethod,
                 .method_fallback = method},
      .layers = layers,
  };
}

// Llama 4: sigmoid of the chosen logits scales the expert input; the shared
// expert (width intermediate_size) is always added, ungated; MoE layers by
// moe_layers or interleave_moe_layer_step.
MoeDescription Llama4Moe() {
  return {
      .experts = {"num_local_experts"},
      .inter = {"intermediate_size"},
      .shared = {.rule = SharedExpertRule::kSameAsRouted},
      .score = ScoreFunc::kSigmoid,
      .route_norm = {.fallback = false},
      .score_before_experts = true,
      .layers = MoeLayerRule::kLlama4List,
  };
}

}  // namespace

namespace {

// The table family files add to; FamilyTable() reads it.
std::deque<FamilyEntry>& MutableFamilyTable() {
  static auto* table = new std::deque<FamilyEntry>{
      // Mixtral: softmax, top-k renormalised, every layer MoE.
      {.model_type = "mixtral",
       .family = HfFamily::kMixtral,
       .architectures = {"MixtralForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {.fallback = true}}},
      // Qwen2-MoE: softmax, optional renorm, a sigmoid-gated shared expert;
      // sparse layers by decoder_sparse_step and mlp_only_layers.
      {.model_type = "qwen2_moe",
       .family = HfFamily::kQwen2Moe,
       .architectures = {"Qwen2MoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"shared_expert_intermediate_size"},
                          .gated = true},
               .route_norm = {"norm_topk_prob", false},
               .layers = MoeLayerRule::kQwenSparseStep}},
      // Qwen3-MoE: Qwen2-MoE without the shared expert.
      {.model_type = "qwen3_moe",
       .family = HfFamily::kQwen3Moe,
       .architectures = {"Qwen3MoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .route_norm = {"norm_topk_prob", false},
               .layers = MoeLayerRule::kQwenSparseStep}},
      // OLMoE: softmax, optional renorm, every layer MoE.
      {.model_type = "olmoe",
       .family = HfFamily::kOlmoe,
       .architectures = {"OlmoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {"norm_topk_prob", false}}},
      // DeepSeek-V2: softmax, greedy or group-limited (max) choice, renorm
      // or scale; MoE layers from first_k_dense_replace every
      // moe_layer_freq-th.
      {.model_type = "deepseek_v2",
       .family = HfFamily::kDeepseekV2,
       .architectures = {"DeepseekV2ForCausalLM"},
       .moe = DeepseekMoe("softmax", "greedy", RenormAndScale::kRenormOrScale,
                          MoeLayerRule::kDeepseekFirstDenseAndFreq)},
      // DeepSeek-V3: sigmoid, the correction bias for choosing within the
      // top-2-sum groups (noaux_tc), renorm then scale.
      {.model_type = "deepseek_v3",
       .family = HfFamily::kDeepseekV3,
       .architectures = {"DeepseekV3ForCausalLM"},
       .moe =
           DeepseekMoe("sigmoid", "noaux_tc", RenormAndScale::kRenormThenScale,
                       MoeLayerRule::kDeepseekFirstDenseAndFreq)},
      // GLM-4.5: DeepSeek-V3's gate; every layer from first_k_dense_replace
      // on is MoE.
      {.model_type = "glm4_moe",
       .family = HfFamily::kGlm4Moe,
       .architectures = {"Glm4MoeForCausalLM"},
       .moe =
           DeepseekMoe("sigmoid", "noaux_tc", RenormAndScale::kRenormThenScale,
                       MoeLayerRule::kGlmFirstDense)},
      // GLM-5: its DSA attention is not the service's; its MoE is GLM-4.5's
      // (layers from first_k_dense_replace on unless listed).
      {.model_type = "glm_moe_dsa",
       .family = HfFamily::kGlmMoeDsa,
       .architectures = {"GlmMoeDsaForCausalLM"},
       .like = HfFamily::kGlm4Moe,
       .moe_layer_lists = {"mlp_layer_types"}},
      // MiMo-V2-Flash: DeepSeek-V3's gate with n_shared_experts null (no
      // shared expert) and routed_scaling_factor null (1.0). The Hub config
      // lists moe_layer_freq per layer, transformers' says mlp_layer_types.
      {.model_type = "mimo_v2_flash",
       .family = HfFamily::kMimoV2Flash,
       .architectures = {"MiMoV2FlashForCausalLM"},
       .like = HfFamily::kDeepseekV3,
       .moe_layer_lists = {"mlp_layer_types", "moe_layer_freq"}},
      // Moonshot's Kimi K2 is a DeepSeek-V3 model under its own model_type.
      {.model_type = "kimi_k2",
       .family = HfFamily::kKimiK2,
       .architectures = {"DeepseekV3ForCausalLM"},
       .like = HfFamily::kDeepseekV3},
      // Qwen3.5 / 3.6: Qwen3-Next's MoE in a multimodal wrapper. Its router
      // always renormalises and every decoder layer is sparse, so it has no
      // norm_topk_prob and no sparse-layer keys.
      {.model_type = "qwen3_5_moe",
       .family = HfFamily::kQwen35Moe,
       .architectures = {"Qwen3_5MoeForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kQwen3Next,
       .absent_keys = {"norm_topk_prob", "decoder_sparse_step",
                       "mlp_only_layers"},
       .layer_prefix = "model.language_model.layers.{L}."},
      // Qwen3-Next: Qwen2-MoE's math with renorm by default (its renorm has
      // no epsilon, which is below fp32 resolution next to the engine's
      // +1e-20) and a gated shared expert its block always has.
      {.model_type = "qwen3_next",
       .family = HfFamily::kQwen3Next,
       .architectures = {"Qwen3NextForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"shared_expert_intermediate_size"},
                          .gated = true,
                          .required = true},
               .route_norm = {"norm_topk_prob", true},
               .layers = MoeLayerRule::kQwenSparseStep}},
      // MiniMax-M2: sigmoid, correction bias for the choice, renorm, no
      // scale, no shared expert, every layer MoE. transformers ignores the
      // release config's scoring_func / use_routing_bias, and so does this.
      {.model_type = "minimax_m2",
       .family = HfFamily::kMinimaxM2,
       .architectures = {"MiniMaxM2ForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {.fallback = true},
               .use_bias = true}},
      // Llama 4 (Llama4ForConditionalGeneration: text_config,
      // language_model.) and its text-only model.
      {.model_type = "llama4",
       .family = HfFamily::kLlama4,
       .architectures = {"Llama4ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "language_model.model.layers.{L}.",
       .moe = Llama4Moe()},
      {.model_type = "llama4_text",
       .family = HfFamily::kLlama4Text,
       .architectures = {"Llama4ForCausalLM"},
       .moe = Llama4Moe()},
      // ERNIE 4.5: softmax in fp32, the moe_statics bias for choosing only,
      // weights p / max(sum p, moe_norm_min), no scale; MoE layers every
      // moe_layer_interval-th from moe_layer_start_index to
      // moe_layer_end_index.
      {.model_type = "ernie4_5_moe",
       .family = HfFamily::kErnie45Moe,
       .architectures = {"Ernie4_5_MoeForCausalLM"},
       .top_k_keys = {"moe_k"},
       .moe = {.refuse = RefuseErnieLinearBiases,
               .experts = {"moe_num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"moe_num_shared_experts", 0}},
               .route_norm = {.fallback = true},
               .norm_min = {"moe_norm_min", 1e-12},
               .use_bias = true,
               .layers = MoeLayerRule::kErnieInterval}},
      // gpt-oss: top-k of the biased router logits, softmax over those k;
      // expert biases; the clamped gptoss activation (alpha 1.702 is a
      // constant of the model code, the limit is swiglu_limit); every layer
      // MoE, no shared expert. Its release config says experts_per_token.
      {.model_type = "gpt_oss",
       .family = HfFamily::kGptOss,
       .architectures = {"GptOssForCausalLM"},
       .top_k_keys = {"num_experts_per_tok", "experts_per_token"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .score = ScoreFunc::kTopkSoftmax,
               .route_norm = {.fallback = false},
               .activation = {.act = Activation::kGptOss,
                              .alpha = 1.702f,
                              .limit = {"swiglu_limit", 7.0}},
               .router_bias = true,
               .expert_bias = true}},
      // DeepSeek-V4 (unquantised or as released): sqrtsoftplus scores,
      // correction bias for choosing, renorm always, x
      // routed_scaling_factor, silu_clamp on routed and shared experts; its
      // first layers hash-routed (DeepseekV4HashLayers). expert_dtype fp4:
      // MXFP4 routed experts with E8M0 `.scale`; fp8 / bf16: F8_E4M3 with
      // `.scale` or unquantised.
      {.model_type = "deepseek_v4",
       .family = HfFamily::kDeepseekV4,
       .architectures = {"DeepseekV4ForCausalLM"},
       .layer_prefix = "layers.{L}.",
       .moe = {.experts = {"n_routed_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"n_shared_experts", 1}},
               .score_key = {"scoring_func", "sqrtsoftplus", kSqrtSoftplusOnly},
               .formats = {{"expert_dtype", "bf16", {"fp4", "fp8", "bf16"}}},
               .route_norm = {.fallback = true},
               .route_scale = {"routed_scaling_factor", 1.0},
               .activation = {.act = Activation::kSiluClamp,
                              .limit = {"swiglu_limit", 10.0}},
               .use_bias = true,
               .finish = DeepseekV4HashLayers}},
      // Nemotron 3 Nano / Super: Mamba, attention and MoE layers in one
      // stack, named backbone.layers.{L}.mixer.*. DeepSeek-V3's gate
      // (sigmoid, correction bias for the choice, groups, renorm, scale)
      // over non-gated relu2 experts; Super's LatentMoE runs them at
      // moe_latent_size between fc1/fc2_latent_proj, which carry biases
      // when mlp_bias (the experts' own biases under mlp_bias have no role:
      // the checkpoint refuses them unless they are zero). The shared
      // expert reads the full-width x.
      {.model_type = "nemotron_h",
       .family = HfFamily::kNemotronH,
       .architectures = {"NemotronHForCausalLM"},
       .layer_prefix = "backbone.layers.{L}.",
       .latent_key = "moe_latent_size",
       .moe = {.experts = {"n_routed_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"moe_shared_expert_intermediate_size", 0}},
               .latent_bias = {"mlp_bias", false},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {"norm_topk_prob", true},
               .route_scale = {"routed_scaling_factor", 1.0},
               .groups = {.rule = GroupRule::kFromKeys},
               .activation = {.act = Activation::kRelu2,
                              .gated = false,
                              .key = "mlp_hidden_act",
                              .name = "relu2"},
               .use_bias = true,
               .layers = MoeLayerRule::kNemotronPattern}},
      // Gemma 4's MoE block (enable_moe_block): the router reads rms(x) *
      // scale * H^-0.5, softmax, top-k renormalised times a per-expert
      // scale; GeGLU-tanh experts and the dense MLP (the shared expert,
      // width intermediate_size) each between their own pre- and
      // post-RMSNorm. Every layer has it.
      {.model_type = "gemma4",
       .family = HfFamily::kGemma4,
       .architectures = {"Gemma4ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "model.language_model.layers.{L}.",
       .top_k_keys = {"top_k_experts"},
       .moe = {.refuse = RefuseGemma4WithoutMoeBlock,
               .experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"intermediate_size"}},
               .route_norm = {.fallback = true},
               .activation = {.act = Activation::kGeluTanh,
                              .key = "hidden_activation",
                              .name = "gelu_pytorch_tanh"},
               .norm_eps = {"rms_norm_eps", 1e-6},
               .router_prenorm = true,
               .per_expert_scale = true,
               .branch_norms = true}},
      // Kimi K3 (kimi_linear text config, recognised by its top-level
      // model_type): sigmoid (or softmax) gate with the correction bias for
      // the choice, optional renorm and scale, groups only when they limit;
      // SiTU experts at routed_expert_hidden_size between
      // routed_expert_down/up_proj with an RMSNorm on the latent sum;
      // shared experts on the full-width x. MoE layers as DeepSeek's.
      {.model_type = "kimi_k3",
       .family = HfFamily::kKimiK3,
       .architectures = {"KimiK3ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "language_model.model.layers.{L}.",
       .latent_key = "routed_expert_hidden_size",
       .top_k_keys = {"num_experts_per_token"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .latent_norm = {"latent_moe_use_norm", false},
               .score_key = {"moe_router_activation_func", "sigmoid",
                             kSigmoidOrSoftmax},
               .route_norm = {"moe_renormalize", true},
               .route_scale = {"routed_scaling_factor", 1.0},
               .groups = {.rule = GroupRule::kOnlyWhenLimiting,
                          .count = {"num_expert_group", 1}},
               .activation = {.act = Activation::kSitu,
                              .key = "hidden_act",
                              .name = "situ",
                              .beta = {"activation_situ_beta", 1.0},
                              .linear_beta = {"activation_situ_linear_beta",
                                              0.0}},
               .norm_eps = {"rms_norm_eps", 1e-6},
               .use_bias = true,
               .layers = MoeLayerRule::kDeepseekFirstDenseAndFreq}},
      // FlexOlmo: OLMoE's sparse block (softmax, norm_topk_prob) and names.
      {.model_type = "flex_olmo",
       .family = HfFamily::kFlexOlmo,
       .architectures = {"FlexOlmoForCausalLM"},
       .like = HfFamily::kOlmoe},
      // Mellum: Qwen3-MoE's sparse block and names; mlp_layer_types says
      // which layers are sparse where given (all of them by default).
      {.model_type = "mellum",
       .family = HfFamily::kMellum,
       .architectures = {"MellumForCausalLM"},
       .like = HfFamily::kQwen3Moe,
       .moe_layer_lists = {"mlp_layer_types"}},
      // MiniMax-Text-01 / MiniMax-M1: Mixtral's MoE (softmax, top-k
      // renormalised, every layer) and names beside lightning attention,
      // which is the host's.
      {.model_type = "minimax",
       .family = HfFamily::kMinimax,
       .architectures = {"MiniMaxForCausalLM", "MiniMaxText01ForCausalLM",
                         "MiniMaxM1ForCausalLM"},
       .like = HfFamily::kMixtral},
      // Qwen3-VL-MoE: Qwen3-MoE's keys and math under text_config; its
      // experts fused for x·W under model.language_model. (own names).
      {.model_type = "qwen3_vl_moe",
       .family = HfFamily::kQwen3VlMoe,
       .architectures = {"Qwen3VLMoeForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "model.language_model.layers.{L}."},
      // GraniteMoe: the k largest logits, softmax over those k, which is
      // softmax then a renorm of the top k; every layer MoE.
      {.model_type = "granitemoe",
       .family = HfFamily::kGraniteMoe,
       .architectures = {"GraniteMoeForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {.fallback = true}}},
      // Snowflake Arctic: Mixtral's block (renormalised when k > 1) every
      // moe_layer_frequency-th layer. Its residual MLP runs on another
      // input than the MoE block (after its own norm), so it stays the
      // host's and is no shared expert.
      {.model_type = "arctic",
       .family = HfFamily::kArctic,
       .architectures = {"ArcticForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {.fallback = true},
               .route_norm_needs_two = true,
               .layers = MoeLayerRule::kArcticFrequency}},
      // Aria: the language model under text_config (language_model.model.
      // in the released checkpoint); the moe_topk largest logits, softmax
      // over them; moe_num_shared_experts ungated shared experts of the
      // routed width run as one; every layer MoE.
      {.model_type = "aria",
       .family = HfFamily::kAria,
       .architectures = {"AriaForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "language_model.model.layers.{L}.",
       .top_k_keys = {"moe_topk"},
       .moe = {.experts = {"moe_num_experts"},
               .inter = {"intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"moe_num_shared_experts", 2}},
               .route_norm = {.fallback = true}}},
      // Jamba: softmax top-k without renorm under feed_forward.; MoE layers
      // by expert_layer_period / expert_layer_offset (Mamba and attention
      // mixers are the host's).
      {.model_type = "jamba",
       .family = HfFamily::kJamba,
       .architectures = {"JambaForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {.fallback = false},
               .layers = MoeLayerRule::kJambaPeriod}},
      // GraniteMoeShared: GraniteMoe's routed experts and an ungated shared
      // MLP of shared_intermediate_size (none at 0), its gate and up rows
      // fused in one input_linear.
      {.model_type = "granitemoeshared",
       .family = HfFamily::kGraniteMoeShared,
       .architectures = {"GraniteMoeSharedForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"shared_intermediate_size", 0}},
               .route_norm = {.fallback = true}}},
      // Granite 4.0-H: GraniteMoeShared's MoE on every layer; its Mamba-2
      // and attention mixers (layers_block_type) are the host's.
      {.model_type = "granitemoehybrid",
       .family = HfFamily::kGraniteMoeHybrid,
       .architectures = {"GraniteMoeHybridForCausalLM"},
       .like = HfFamily::kGraniteMoeShared},
      // DBRX: d_model / n_layers and the MoE keys in ffn_config; softmax,
      // top moe_top_k divided by their moe_normalize_expert_weights-norm
      // (DbrxExpertWeightNorm); every layer MoE, experts packed by rows
      // under transformer.blocks.{L}.ffn.
      {.model_type = "dbrx",
       .family = HfFamily::kDbrx,
       .architectures = {"DbrxForCausalLM"},
       .layer_prefix = "transformer.blocks.{L}.",
       .top_k_keys = {"moe_top_k"},
       .moe_config = "ffn_config",
       .renamed_keys = {{"hidden_size", "d_model"},
                        {"num_hidden_layers", "n_layers"}},
       .moe = {.experts = {"moe_num_experts"},
               .inter = {"ffn_hidden_size"},
               .route_norm = {.fallback = true},
               .finish = DbrxExpertWeightNorm}},
      // Hunyuan-A13B: softmax, top moe_topk renormalised (transformers
      // renormalises even one weight), one ungated shared MLP of the routed
      // width, every layer MoE; moe_topk and the widths may be per-layer
      // lists of one value.
      {.model_type = "hunyuan_v1_moe",
       .family = HfFamily::kHunyuanV1Moe,
       .architectures = {"HunYuanMoEV1ForCausalLM"},
       .top_k_keys = {"moe_topk"},
       .layer_lists = {"moe_topk", "num_experts", "moe_intermediate_size",
                       "num_shared_expert"},
       .moe = {.experts = {"num_experts"},
               .inter = {"intermediate_size"},
               .shared = {.rule = SharedExpertRule::kSameAsRouted},
               .route_norm = {.fallback = true},
               .finish = HunyuanWidthsAgree}},
      // Qwen3-Omni: its thinker's language model is Qwen3-MoE (keys under
      // thinker_config.text_config, tensors under thinker.model.); the
      // talker's own MoE and the audio and vision towers are not served.
      {.model_type = "qwen3_omni_moe",
       .family = HfFamily::kQwen3OmniMoe,
       .architectures = {"Qwen3OmniMoeForConditionalGeneration"},
       .sub_config = {"thinker_config", "text_config"},
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "thinker.model.layers.{L}."},
      // deepseek-moe-16b (DeepseekForCausalLM): DeepSeek-V2's block as its
      // model code has it, softmax top-k renormalised by norm_topk_prob,
      // n_shared_experts shared, MoE layers from first_k_dense_replace
      // every moe_layer_freq-th. That code reads no topk_method, groups,
      // routed_scaling_factor or scoring_func (always softmax).
      {.model_type = "deepseek",
       .family = HfFamily::kDeepseek,
       .architectures = {"DeepseekForCausalLM"},
       .like = HfFamily::kDeepseekV2,
       .absent_keys = {"scoring_func", "topk_method", "n_group", "topk_group",
                       "routed_scaling_factor"}},
      // DeepSeek-V3.2: its sparse (DSA) attention is not the service's; its
      // MoE is DeepSeek-V3's.
      {.model_type = "deepseek_v32",
       .family = HfFamily::kDeepseekV32,
       .architectures = {"DeepseekV32ForCausalLM"},
       .like = HfFamily::kDeepseekV3},
      // dots.llm1: transformers runs DeepSeek-V3's block (sigmoid, the
      // correction bias for choosing, groups, renorm, routed_scaling_factor
      // on the routed experts only, the shared experts added unscaled)
      // whatever the config says of scoring_func or topk_method; MoE layers
      // from first_k_dense_replace on.
      {.model_type = "dots1",
       .family = HfFamily::kDots1,
       .architectures = {"Dots1ForCausalLM"},
       .like = HfFamily::kDeepseekV3,
       .absent_keys = {"scoring_func", "topk_method", "moe_layer_freq"}},
      // GLM-4.7-Flash: GLM-4.5's MoE; mlp_layer_types names the MoE layers
      // when given, else first_k_dense_replace.
      {.model_type = "glm4_moe_lite",
       .family = HfFamily::kGlm4MoeLite,
       .architectures = {"Glm4MoeLiteForCausalLM"},
       .like = HfFamily::kGlm4Moe,
       .moe_layer_lists = {"mlp_layer_types"}},
      // Solar Open: GLM-4.5's MoE on every decoder layer (its config has no
      // first_k_dense_replace).
      {.model_type = "solar_open",
       .family = HfFamily::kSolarOpen,
       .architectures = {"SolarOpenForCausalLM"},
       .like = HfFamily::kGlm4Moe,
       .absent_keys = {"first_k_dense_replace"}},
      // Kimi Linear: Kimi K3's gate keys (sigmoid or softmax, correction
      // bias for the choice, moe_renormalize, scale, groups only when they
      // limit) over SiLU experts of moe_intermediate_size, shared experts
      // num_shared_experts of them; MoE layers as DeepSeek's.
      {.model_type = "kimi_linear",
       .family = HfFamily::kKimiLinear,
       .architectures = {"KimiLinearForCausalLM"},
       .top_k_keys = {"num_experts_per_token", "num_experts_per_tok"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .score_key = {"moe_router_activation_func", "sigmoid",
                             kSigmoidOrSoftmax},
               .route_norm = {"moe_renormalize", true},
               .route_scale = {"routed_scaling_factor", 1.0},
               .groups = {.rule = GroupRule::kOnlyWhenLimiting,
                          .count = {"num_expert_group", 1}},
               .activation = {.key = "hidden_act", .name = "silu"},
               .use_bias = true,
               .layers = MoeLayerRule::kDeepseekFirstDenseAndFreq}},
      // Ling V1 (BailingMoeForCausalLM): softmax top-k, renorm by
      // norm_topk_prob, num_shared_experts shared; layers from
      // first_k_dense_replace (0: every one) on.
      {.model_type = "bailing_moe",
       .family = HfFamily::kBailingMoe,
       .architectures = {"BailingMoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .score_key = {"score_function", "softmax", kSoftmaxOnly},
               .route_norm = {"norm_topk_prob", true},
               .route_norm_needs_two = true,
               .layers = MoeLayerRule::kGlmFirstDense}},
      // Ling 2.0 (BailingMoeV2ForCausalLM, model_type bailing_moe as well:
      // architectures tells them apart): sigmoid, gate.expert_bias for the
      // choice within groups by top-2 sum (n_group / topk_group), the top-k
      // always renormalised (when k > 1) and scaled by
      // routed_scaling_factor; layers from first_k_dense_replace on.
      {.model_type = "bailing_moe",
       .family = HfFamily::kBailingMoeV2,
       .architectures = {"BailingMoeV2ForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .score_key = {"score_function", "sigmoid", kSigmoidOnly},
               .route_norm = {.fallback = true},
               .route_norm_needs_two = true,
               .route_scale = {"routed_scaling_factor", 1.0},
               .groups = {.rule = GroupRule::kFromKeys},
               .use_bias = true,
               .layers = MoeLayerRule::kGlmFirstDense}},
      // GLM-4.5V / 4.6V: GLM-4.5's MoE under text_config, named
      // model.language_model.layers.{L}.
      {.model_type = "glm4v_moe",
       .family = HfFamily::kGlm4vMoe,
       .architectures = {"Glm4vMoeForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kGlm4Moe,
       .layer_prefix = "model.language_model.layers.{L}."},
      // Kimi-VL and Kimi K2.5: a DeepSeek-V3 language model under
      // text_config, named language_model.model.layers.{L}.
      {.model_type = "kimi_vl",
       .family = HfFamily::kKimiVl,
       .architectures = {"KimiVLForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kDeepseekV3,
       .layer_prefix = "language_model.model.layers.{L}."},
      {.model_type = "kimi_k25",
       .family = HfFamily::kKimiK25,
       .architectures = {"KimiK25ForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kDeepseekV3,
       .layer_prefix = "language_model.model.layers.{L}."},
      // AFMoE (Arcee Trinity), as transformers routes it: sigmoid,
      // expert_bias for the choice, the top-k always renormalised and
      // scaled by route_scale (its config's score_func, route_norm and
      // groups are not read); num_shared_experts shared; MoE layers from
      // num_dense_layers on.
      {.model_type = "afmoe",
       .family = HfFamily::kAfmoe,
       .architectures = {"AfmoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {.fallback = true},
               .route_scale = {"route_scale", 1.0},
               .activation = {.key = "hidden_act", .name = "silu"},
               .use_bias = true,
               .layers = MoeLayerRule::kNumDenseLayers}},
      // LFM2-MoE: sigmoid, expert_bias for the choice when use_expert_bias,
      // renorm by norm_topk_prob, routed_scaling_factor, no shared expert;
      // MoE layers from num_dense_layers on.
      {.model_type = "lfm2_moe",
       .family = HfFamily::kLfm2Moe,
       .architectures = {"Lfm2MoeForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {"norm_topk_prob", true},
               .route_scale = {"routed_scaling_factor", 1.0},
               .layers = MoeLayerRule::kNumDenseLayers,
               .correction_bias = {"use_expert_bias", true}}},
      // EXAONE-MoE (K-EXAONE), as transformers runs it: sigmoid,
      // mlp.gate.e_score_correction_bias for the choice within n_group /
      // topk_group groups by top-2 sum, norm_topk_prob, x
      // routed_scaling_factor, num_shared_experts shared; MoE layers by
      // mlp_layer_types, else from first_k_dense_replace on; one
      // swiglu_limits value on every layer is silu_clamp.
      {.model_type = "exaone_moe",
       .family = HfFamily::kExaoneMoe,
       .architectures = {"ExaoneMoeForCausalLM"},
       .moe_layer_lists = {"mlp_layer_types"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 1}},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {"norm_topk_prob", true},
               .route_scale = {"routed_scaling_factor", 2.5},
               .groups = {.rule = GroupRule::kFromKeys},
               .activation = {.key = "hidden_act", .name = "silu"},
               .use_bias = true,
               .layers = MoeLayerRule::kGlmFirstDense,
               .finish = ExaoneMoeSwigluLimits}},
      // PhiMoE (Phi-3.5-MoE): sparsemixer top-2 at inference, its epsilon
      // router_jitter_noise (input_jitter_noise acts in training only);
      // weights final, every layer MoE, no shared expert.
      {.model_type = "phimoe",
       .family = HfFamily::kPhimoe,
       .architectures = {"PhimoeForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .score = ScoreFunc::kSparsemixer,
               .route_norm = {.fallback = false},
               .jitter_eps = {"router_jitter_noise", 0.01}}},
      // LongCat-Flash: softmax over n_routed_experts + zero_expert_num
      // logits, the correction bias for the choice, no renorm, times
      // routed_scaling_factor; a chosen zero ("identity") expert adds w * x.
      // num_layers counts its layers (num_hidden_layers its sublayers).
      {.model_type = "longcat_flash",
       .family = HfFamily::kLongcatFlash,
       .architectures = {"LongcatFlashForCausalLM"},
       .top_k_keys = {"moe_topk"},
       .num_layers_key = "num_layers",
       .moe = {.experts = {"n_routed_experts"},
               .inter = {"expert_ffn_hidden_size"},
               .route_norm = {.fallback = false},
               .route_scale = {"routed_scaling_factor", 6.0},
               .use_bias = true,
               .zero_experts = {"zero_expert_num", 0},
               .zero_expert_type = {"zero_expert_type",
                                    "identity",
                                    {"identity"}}}},
      // Cohere2-MoE: top-k of the logits then softmax over the k (or their
      // sigmoids, renormalised by norm_topk_prob); num_shared_experts of
      // the expert width; y = routed + shared ("sum") or half of it
      // ("average"); MoE layers from first_k_dense_replace unless listed.
      {.model_type = "cohere2_moe",
       .family = HfFamily::kCohere2Moe,
       .architectures = {"Cohere2MoeForCausalLM"},
       .moe_layer_lists = {"mlp_layer_types"},
       .moe = {.experts = {"num_experts"},
               .inter = {"intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0}},
               .score_key = {"expert_selection_fn", "softmax",
                             kTopkSoftmaxOrSigmoid},
               .route_norm = {"norm_topk_prob", true},
               .layers = MoeLayerRule::kGlmFirstDense,
               .output_scale = {"shared_expert_combination_strategy", "average",
                                kSumOrAverage}}},
      // JetMoE: top-k of the logits then softmax over the k, SiLU-gated
      // experts packed as input_linear [E, 2I, H] / output_linear [E, H,
      // I], and the layer's output bias mlp.bias; every layer MoE.
      {.model_type = "jetmoe",
       .family = HfFamily::kJetMoe,
       .architectures = {"JetMoeForCausalLM"},
       .moe = {.experts = {"num_local_experts"},
               .inter = {"intermediate_size"},
               .score = ScoreFunc::kTopkSoftmax,
               .route_norm = {.fallback = false},
               .activation = {.act = Activation::kSilu,
                              .key = "activation_function",
                              .name = "silu"},
               .output_bias = true}},
      // Step-3.5-Flash: an fp32 router, sigmoid (moe_router_activation)
      // with moe.router_bias for the choice, renorm (norm_expert_weight)
      // and moe_router_scaling_factor; experts packed per role as
      // nn.Linear [E, I, H]; the share_expert (share_expert_dim) at the
      // layer level, ungated; each layer's swiglustep limits from
      // swiglu_limits / swiglu_limits_shared (Step3p5LayerLimits). MoE
      // layers by moe_layers_enum, else all but layer 0; the MTP layers
      // after num_hidden_layers are never served.
      {.model_type = "step3p5",
       .family = HfFamily::kStep3p5,
       .architectures = {"Step3p5ForCausalLM"},
       .top_k_keys = {"moe_top_k"},
       .moe = {.experts = {"moe_num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"share_expert_dim"},
                          .required = true},
               .score_key = {"moe_router_activation", "sigmoid",
                             kSigmoidOrSoftmax},
               .route_norm = {"norm_expert_weight", true},
               .route_scale = {"moe_router_scaling_factor", 1.0},
               .use_bias = true,
               .layers = MoeLayerRule::kStepLayersEnum,
               .finish = Step3p5LayerLimits}},
      // Grok-1 as vLLM serves it (hpcai-tech's conversion): router logits
      // soft-capped at c * tanh(l / c) (router_logit_softcapping, 30 when
      // absent), softmax top-k renormalised, GELU (erf) experts linear /
      // linear_v / linear_1 under moe_block; every layer MoE. Grok-2's
      // residual_moe is refused.
      {.model_type = "grok-1",
       .family = HfFamily::kGrok1,
       .architectures = {"Grok1ModelForCausalLM", "Grok1ForCausalLM"},
       .renamed_keys = {{"num_experts", "num_local_experts"},
                        {"moe_router_renormalize", "moe_renormalize"}},
       .moe = {.refuse = RefuseGrokResidualMoe,
               .experts = {"num_experts"},
               .inter = {"intermediate_size"},
               .route_norm = {"moe_router_renormalize", true},
               .activation = {.act = Activation::kGeluErf},
               .router_softcap = {"router_logit_softcapping", 30.0}}},
      // Step-3 (Step3TextForCausalLM, the language model of Step3-VL):
      // Step-3.5's moe.* experts packed per role and its layer-level
      // share_expert (share_expert_dim, SiLU-gated, unscaled), routed by a
      // softmax top-k over moe.gate, renormalised when norm_expert_weight
      // (false when absent, as vLLM's Step3TextConfig says); no bias, no
      // scale. MoE layers by moe_layers_enum, else all but layer 0.
      {.model_type = "step3_text",
       .family = HfFamily::kStep3Text,
       .architectures = {"Step3TextForCausalLM"},
       .top_k_keys = {"moe_top_k"},
       .moe = {.experts = {"moe_num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kWidthKey,
                          .key = {"share_expert_dim"},
                          .required = true},
               .route_norm = {"norm_expert_weight", false},
               .layers = MoeLayerRule::kStepLayersEnum}},
      // ERNIE-4.5-VL as released (the PT checkpoints vLLM loads): ERNIE
      // 4.5's router and layer rule for each of a layer's two expert sets,
      // the text set with the first entry of each [text, vision] pair, the
      // vision set with the second; the shared experts are the text width
      // times moe_num_shared_experts and run for every token.
      {.model_type = "ernie4_5_moe_vl",
       .family = HfFamily::kErnie45VlMoe,
       .architectures = {"Ernie4_5_VLMoeForConditionalGeneration"},
       .like = HfFamily::kErnie45Moe,
       .modality_lists = {"moe_num_experts", "moe_intermediate_size",
                          "moe_layer_start_index", "moe_layer_end_index"}},
      // Hy3 (Tencent Hy3-preview) as transformers runs it: sigmoid,
      // mlp.expert_bias for the choice, the top-k always renormalised and
      // scaled by router_scaling_factor (vLLM reads the config's route_norm,
      // transformers does not); num_shared_experts of the routed width in
      // an ungated mlp.shared_mlp; the routed width moe_intermediate_size,
      // or the release's expert_hidden_dim. MoE layers by mlp_layer_types,
      // else from first_k_dense_replace on (a config with neither reads
      // every layer as MoE, and a release's dense layer 0 is then refused
      // at open for its missing router); the MTP layer after
      // num_hidden_layers is never served.
      {.model_type = "hy_v3",
       .family = HfFamily::kHyV3,
       .architectures = {"HYV3ForCausalLM"},
       .moe_layer_lists = {"mlp_layer_types"},
       .renamed_keys = {{"moe_intermediate_size", "expert_hidden_dim"}},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 1}},
               .score = ScoreFunc::kSigmoid,
               .route_norm = {.fallback = true},
               .route_scale = {"router_scaling_factor", 2.826},
               .activation = {.key = "hidden_act", .name = "silu"},
               .use_bias = true,
               .layers = MoeLayerRule::kGlmFirstDense}},
      // Ling-3.0 (BailingMoeV3ForCausalLM): Ling 2.0's gate (sigmoid,
      // gate.expert_bias for the choice within n_group / topk_group groups,
      // renormalised when k > 1, x routed_scaling_factor), shared experts
      // num_shared_experts x moe_shared_expert_intermediate_size; layers
      // from first_k_dense_replace on. The routed and shared experts of
      // layer L run swiglustep with expert_swiglu_limit_list[L] and
      // share_expert_swiglu_limit_list[L] (0 or null: silu), as vLLM and
      // SGLang apply them: the remote modeling code ignores the lists,
      // while the release was trained with them (Ling3LayerLimits).
      {.model_type = "bailing_moe_v3",
       .family = HfFamily::kBailingMoeV3,
       .architectures = {"BailingMoeV3ForCausalLM"},
       .moe = {.experts = {"num_experts"},
               .inter = {"moe_intermediate_size"},
               .shared = {.rule = SharedExpertRule::kCountTimesInter,
                          .key = {"num_shared_experts", 0},
                          .width = {"moe_shared_expert_intermediate_size"}},
               .score_key = {"score_function", "sigmoid", kSigmoidOnly},
               .route_norm = {.fallback = true},
               .route_norm_needs_two = true,
               .route_scale = {"routed_scaling_factor", 1.0},
               .groups = {.rule = GroupRule::kFromKeys},
               .use_bias = true,
               .layers = MoeLayerRule::kGlmFirstDense,
               .finish = Ling3LayerLimits}},
      // Multimodal wrappers: the language model's keys in a sub-config, its
      // MoE layers under the wrapper's prefix, read as the language model's
      // family; vision (and audio) towers and projectors are not the MoE
      // service's. Step3-VL: Step-3's text model, named as step3_text.
      {.model_type = "step3_vl",
       .family = HfFamily::kStep3Vl,
       .architectures = {"Step3VLForConditionalGeneration"},
       .text_config = true,
       .sub_model_types = {"step3_text"},
       .like = HfFamily::kStep3Text},
      // MiniMax-VL-01: MiniMax-Text-01 (Mixtral's MoE) under
      // language_model.model.
      {.model_type = "minimax_vl_01",
       .family = HfFamily::kMinimaxVl01,
       .architectures = {"MiniMaxVL01ForConditionalGeneration"},
       .text_config = true,
       .sub_model_types = {"minimax_text_01", "minimax"},
       .like = HfFamily::kMixtral,
       .layer_prefix = "language_model.model.layers.{L}."},
      // Intern-S1 and transformers' InternVL (InternVL3.5-*-HF): a Qwen3-MoE
      // text_config (a dense qwen3 one is refused) under
      // model.language_model.
      {.model_type = "interns1",
       .family = HfFamily::kInternS1,
       .architectures = {"InternS1ForConditionalGeneration"},
       .text_config = true,
       .sub_model_types = {"qwen3_moe"},
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "model.language_model.layers.{L}."},
      {.model_type = "internvl",
       .family = HfFamily::kInternVl,
       .architectures = {"InternVLForConditionalGeneration"},
       .text_config = true,
       .sub_model_types = {"qwen3_moe"},
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "model.language_model.layers.{L}."},
      // InternVLChatModel (the original InternVL3.5 releases) and
      // Ovis2.6-MoE: a Qwen3-MoE llm_config, under language_model.model. and
      // llm.model.
      {.model_type = "internvl_chat",
       .family = HfFamily::kInternVlChat,
       .architectures = {"InternVLChatModel"},
       .sub_config = {"llm_config"},
       .sub_model_types = {"qwen3_moe"},
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "language_model.model.layers.{L}."},
      {.model_type = "ovis2_6_moe",
       .family = HfFamily::kOvis26Moe,
       .architectures = {"Ovis2_6_MoeForCausalLM"},
       .sub_config = {"llm_config"},
       .sub_model_types = {"qwen3_moe"},
       .like = HfFamily::kQwen3Moe,
       .layer_prefix = "llm.model.layers.{L}."},
      // LFM2-VL with an LFM2-MoE text_config (LFM2-VL-8B-A1B; the dense
      // lfm2 ones are refused) under model.language_model.
      {.model_type = "lfm2_vl",
       .family = HfFamily::kLfm2Vl,
       .architectures = {"Lfm2VlForConditionalGeneration"},
       .text_config = true,
       .sub_model_types = {"lfm2_moe"},
       .like = HfFamily::kLfm2Moe,
       .layer_prefix = "model.language_model.layers.{L}."},
      // GraniteMoeSWA (granite-swash): GraniteMoeShared's MoE (its sliding
      // window, sinks and NoPE layers are attention, the host's), in the
      // per-expert-packed v4 names or transformers v5's router.weight and
      // experts.gate_up_proj / down_proj, both of which vLLM reads.
      {.model_type = "granitemoe_swa",
       .family = HfFamily::kGraniteMoeSwa,
       .architectures = {"GraniteMoeSWAForCausalLM"},
       .like = HfFamily::kGraniteMoeShared},
      // MiniCPM-MoE (MiniCPM-MoE-8x2B, remote code, which vLLM serves):
      // Mixtral's MoE (softmax, top-k renormalised, every layer) keyed
      // num_experts, its router mlp.gate and experts mlp.experts.{e}.w1 /
      // w3 / w2. The dense MiniCPMs share model_type and class and have no
      // num_experts: refused naming it. Its embedding and residual scales
      // are the host's.
      {.model_type = "minicpm",
       .family = HfFamily::kMinicpm,
       .architectures = {"MiniCPMForCausalLM"},
       .like = HfFamily::kMixtral,
       .renamed_keys = {{"num_local_experts", "num_experts"}}},
      // Gemma 4 saved text-only (Gemma4ForCausalLM, what transformers'
      // converter writes with --text_only): the text config at the top
      // level, the layers under model.layers.
      {.model_type = "gemma4_text",
       .family = HfFamily::kGemma4Text,
       .architectures = {"Gemma4ForCausalLM"},
       .like = HfFamily::kGemma4,
       .layer_prefix = "model.layers.{L}."},
  };
  return *table;
}

// The first HfFamily value a family file gets: far past the built-in ones.
constexpr int kFirstFileFamily = 1000;

}  // namespace

const std::deque<FamilyEntry>& FamilyTable() { return MutableFamilyTable(); }

HfFamily AddFamilyEntry(FamilyEntry entry) {
  std::deque<FamilyEntry>& table = MutableFamilyTable();
  int next = kFirstFileFamily;
  for (const FamilyEntry& e : table) {
    next = std::max(next, static_cast<int>(e.family) + 1);
  }
  entry.family = static_cast<HfFamily>(next);
  table.push_back(std::move(entry));
  return table.back().family;
}

const FamilyEntry& EntryOf(HfFamily family) {
  for (const auto& e : FamilyTable()) {
    if (e.family == family) return e;
  }
  return FamilyTable().front();
}

}  // namespace moe

// The family table: one description per Hugging Face MoE family
// (hf_config_family.h), read by the one interpreter (hf_config_description.cc).
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

const std::vector<FamilyEntry>& FamilyTable() {
  static const auto* table = new std::vector<FamilyEntry>{
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
  };
  return *table;
}

const FamilyEntry& EntryOf(HfFamily family) {
  for (const auto& e : FamilyTable()) {
    if (e.family == family) return e;
  }
  return FamilyTable().front();
}

}  // namespace moe

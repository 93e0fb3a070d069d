// The family rules that are no data: each one family's refusal or setting
// that no other family shares, named by MoeDescription::refuse / finish.
#pragma once

#include "absl/status/status.h"
#include "core/hf_config_reader.h"
#include "core/model_source.h"

namespace moe {

// Gemma 4: a model without enable_moe_block has no MoE layers to serve.
absl::Status RefuseGemma4WithoutMoeBlock(const ConfigReader& r,
                                         ModelInfo* info);

// ERNIE 4.5: use_bias (biases on every Linear) is no layout the released
// checkpoints have.
absl::Status RefuseErnieLinearBiases(const ConfigReader& r, ModelInfo* info);

// DeepSeek-V4: layers L < num_hash_layers (or mlp_layer_types "hash_moe")
// are hash-routed through tid2eid [vocab_size, k], without the correction
// bias; the rest choose top-k with it. In a model with both, the top-k
// config is the model's and each hash layer has a routing override.
absl::Status DeepseekV4HashLayers(const ConfigReader& r, ModelInfo* info);

// DBRX: moe_normalize_expert_weights p divides the top-k weights by their
// p-norm; 1 (the release's) is the renormalisation, null none, any other p
// is refused. ffn_act_fn must name silu.
absl::Status DbrxExpertWeightNorm(const ConfigReader& r, ModelInfo* info);

// Hunyuan-A13B: transformers' experts and shared MLP are intermediate_size
// wide, while vLLM reads moe_intermediate_size and num_shared_expert; a
// config where they differ from that is refused naming the key.
absl::Status HunyuanWidthsAgree(const ConfigReader& r, ModelInfo* info);
// EXAONE-MoE: swiglu_limits gives each layer's clamp L (0: none), which
// transformers applies as silu(min(g, L)) * clamp(u, -L, L) on the routed
// and shared experts: the engine's silu_clamp. The first MoE layer's limit
// is the model's; a layer whose limit differs gets its own config. A list
// of another length than num_hidden_layers, or an entry that is not a
// finite limit >= 0, is refused naming the key.
absl::Status ExaoneMoeSwigluLimits(const ConfigReader& r, ModelInfo* info);
// Step-3.5: the routed experts of layer L run swiglustep with limit
// swiglu_limits[L] and the share_expert with swiglu_limits_shared[L]; an
// entry of 0 or null (or no list) is plain silu. The first MoE layer's
// config is the model's, every other one that differs a per-layer
// override. A list of another length than num_hidden_layers (plus the MTP
// layers, num_nextn_predict_layers) is refused naming its key, and so is
// use_moe_router_bias false (the releases choose with moe.router_bias).
// Grok: residual_moe (Grok-2) adds a dense MLP beside the experts and
// scales their sum by 1/sqrt(2), which no family here serves; refused.
absl::Status RefuseGrokResidualMoe(const ConfigReader& r, ModelInfo* info);

absl::Status Step3p5LayerLimits(const ConfigReader& r, ModelInfo* info);
// Ling-3.0: the same swiglustep limits from expert_swiglu_limit_list and
// share_expert_swiglu_limit_list, which vLLM and SGLang apply (the remote
// modeling code does not read them, and the release, trained with them,
// degrades without); pregate_inference true is refused.
absl::Status Ling3LayerLimits(const ConfigReader& r, ModelInfo* info);

}  // namespace moe

// The shape and routing options of one MoE layer (docs/architecture.md
// section 3).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

// kSqrtSoftplus: sqrt(softplus(logit)) elementwise (DeepSeek-V4).
// kTopkSoftmax: the k largest logits are chosen and their weights are the
// softmax over those k logits only (gpt-oss).
// kSparsemixer: PhiMoE's inference-time sparsemixer over two rounds, each
// masking the logits too far below its best (jitter_eps) before a softmax.
enum class ScoreFunc {
  kSoftmax,
  kSigmoid,
  kSqrtSoftplus,
  kTopkSoftmax,
  kSparsemixer
};
// The gated activation of routed and shared experts (docs/architecture.md
// section 3.2): silu(g)*u; gpt-oss's clamped (u'+1)*g'*sigmoid(alpha*g');
// DeepSeek-V4's silu(g')*u' with the same clamps; relu(u)^2 of non-gated
// experts (Nemotron 3); gelu_tanh(g)*u (Gemma 4); Kimi K3's SiTU; the exact
// erf GELU gelu(g)*u (Grok-1); Step-3.5's SwigluStep min(silu(g), L) *
// clamp(u, -L, L), which clamps silu's output where silu_clamp clamps g.
enum class Activation {
  kSilu,
  kGptOss,
  kSiluClamp,
  kRelu2,
  kGeluTanh,
  kSitu,
  kGeluErf,
  kSwigluStep
};
enum class GroupScore { kTop2Sum, kMax };
enum class RoutingMode { kTokenChoice, kExpertChoice };

struct MoeLayerConfig {
  int64_t hidden = 0;       // H
  int64_t inter = 0;        // I, routed expert intermediate size
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // k
  ScoreFunc score_func = ScoreFunc::kSoftmax;
  bool route_norm = true;
  float route_scale = 1.0f;
  int64_t n_groups = 0;  // 0 = no group-limited routing
  int64_t topk_groups = 0;
  GroupScore group_score = GroupScore::kTop2Sum;
  bool use_bias = false;     // expert bias, for choosing only
  int64_t shared_inter = 0;  // 0 = no shared expert
  bool shared_gate = false;  // sigmoid(x g^T) scales the shared expert
  bool score_before_experts = false;
  // Double, like the reference's Python arithmetic: the capacity is
  // ceil(cf*N*k/E) and must land on the same integer.
  double capacity_factor = 0.0;  // 0 = no capacity limit
  RoutingMode routing = RoutingMode::kTokenChoice;
  // 2026 options (tests/golden/README.md); the defaults leave the math above
  // unchanged, and the JSON form lists them only when one differs.
  bool router_bias = false;  // gate.bias [E] added to the logits
  bool expert_bias = false;  // routed experts' b1 [I], b3 [I], b2 [H]
  Activation act = Activation::kSilu;
  float act_alpha = 1.702f;  // gptoss: sigmoid(alpha * g')
  float act_limit = 7.0f;    // gptoss, silu_clamp: L
  // When > 0 and route_norm: w_i = p_i / max(sum_j p_j, norm_min).
  float norm_min = 0.0f;
  // When > 0 the layer is hash-routed: token n's experts are the k ids of
  // row tid2eid[token_ids[n]] of a [hash_vocab, k] table.
  int64_t hash_vocab = 0;
  // 2026b options (Nemotron 3, Gemma 4). Non-gated experts have no W1:
  // out = act(x W3^T) W2^T, for routed and shared experts alike.
  bool gated = true;
  // LatentMoE: when > 0 the routed experts run at this width between the
  // router's projections latent.w1 [latent, H] and latent.w2 [H, latent]
  // (with biases when latent_bias); the router and the shared expert still
  // read the full-width x.
  int64_t latent = 0;
  bool latent_bias = false;
  // The router reads rms(x) * gate.scale * H^-0.5 instead of x.
  bool router_prenorm = false;
  // Each final routing weight is multiplied by gate.per_expert_scale[e].
  bool per_expert_scale = false;
  // Pre- and post-RMSNorms around the routed and the shared branch.
  bool branch_norms = false;
  float norm_eps = 1e-6f;  // the RMSNorms' epsilon
  // 2026c options (Kimi K3): SiTU's beta and lambda (0: u is not capped),
  // and an RMSNorm (latent.norm) on the weighted latent sum.
  float act_beta = 1.0f;
  float act_linear_beta = 0.0f;
  bool latent_norm = false;
  // 2026d options. sparsemixer's epsilon (PhiMoE router_jitter_noise).
  float jitter_eps = 0.0f;
  // LongCat-Flash's zero-computation experts: the router scores E + Z ids
  // (gate.weight [E + Z, H]); a chosen id e >= E adds weight * x to y on
  // the router and is never dispatched.
  int64_t zero_experts = 0;
  // When > 0 the logits become c * tanh(logit / c) before score_func (Grok).
  float router_softcap = 0.0f;
  // The shared expert's own activation and limit (Step-3.5); unset, it
  // uses act and act_limit like the routed experts.
  std::optional<Activation> shared_act = std::nullopt;
  float shared_act_limit = 0.0f;
  // y = output_scale * (routed sum + shared expert), before output_bias
  // (Cohere2-MoE's "average" is 0.5).
  float output_scale = 1.0f;
  // y += output.bias [H] once per token, after everything (JetMoE).
  bool output_bias = false;

  // Checks sizes and option combinations; messages name the offending key.
  absl::Status Validate() const;
  bool has_shared() const { return shared_inter > 0; }
  bool hash_routed() const { return hash_vocab > 0; }
  // Whether any 2026 option differs from its default.
  bool has_2026_options() const;
  bool has_2026b_options() const;
  bool has_2026c_options() const;
  bool has_2026d_options() const;
  // The router's row count: the routed experts and the zero experts.
  int64_t router_rows() const { return num_experts + zero_experts; }
  // The shared expert's activation and its limit.
  Activation shared_activation() const { return shared_act.value_or(act); }
  float shared_limit() const {
    return shared_act.has_value() ? shared_act_limit : act_limit;
  }
  // The width of the rows the routed experts read and write: the latent
  // width under LatentMoE, else H. Every row of the expert-parallel step
  // (dispatch, the wire, the combine) has this width.
  int64_t expert_width() const { return latent > 0 ? latent : hidden; }
  // Whether the routed experts' rows differ from the layer's own: the
  // router transforms x before the step and the weighted sum after it.
  bool has_expert_frame() const { return latent > 0 || branch_norms; }
  bool operator==(const MoeLayerConfig&) const = default;

 private:
  absl::Status Validate2026d() const;
};

absl::string_view ScoreFuncName(ScoreFunc f);
absl::string_view GroupScoreName(GroupScore g);
absl::string_view RoutingModeName(RoutingMode r);
absl::string_view ActivationName(Activation a);
// The activation named `name` as the JSON form spells it.
absl::StatusOr<Activation> ParseActivationName(absl::string_view name);

// The JSON form used by the golden files' `config` metadata and by the
// synthetic model ({"hidden": 64, "inter": 32, "experts": 8, ...}); keys not
// given keep their defaults.
absl::StatusOr<MoeLayerConfig> ParseMoeLayerConfigJson(absl::string_view text);
std::string MoeLayerConfigToJson(const MoeLayerConfig& config);

// Expert-choice capacity: floor(cf*N/E) when cf > 0, else floor(N*k/E),
// clamped to [1, N] (0 when N is 0).
int64_t ExpertChoiceCapacity(const MoeLayerConfig& config, int64_t tokens);
// Token-choice capacity: ceil(cf*N*k/E); only meaningful when cf > 0.
int64_t TokenChoiceCapacity(const MoeLayerConfig& config, int64_t tokens);

}  // namespace moe

// Token routing math (docs/architecture.md section 3), fp32, over raw
// arrays.
#pragma once

#include <cstdint>

namespace moe::kernels::cpu {

enum ScoreFuncId : int32_t {
  kScoreSoftmax = 0,
  kScoreSigmoid = 1,
  kScoreSqrtSoftplus = 2,  // sqrt(softplus(logit)), elementwise
};
enum GroupScoreId : int32_t { kGroupTop2Sum = 0, kGroupMax = 1 };

struct TopKParams {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  const float* expert_bias = nullptr;  // [E], added for choosing only
  int64_t n_groups = 0;                // 0: no group limit
  int64_t topk_groups = 0;
  int32_t group_score = kGroupTop2Sum;
};

// NaN logits and scores and ties follow kernels/routing_rule.h, as the CUDA
// kernel does.
//
// scores[t][e] = softmax over e of logits[t][.], sigmoid(logits[t][e]) or
// sqrt(softplus(logits[t][e])).
// `scores` may alias `logits`.
void ComputeScores(int32_t score_func, const float* logits, int64_t n,
                   int64_t num_experts, float* scores, int num_threads);

// Per token: idx = the top_k experts by choice score c = s + bias, with
// experts outside the best `topk_groups` groups (by top-2 sum or max of c)
// excluded; descending, ties to the lower expert id. w = s[idx].
void SelectTopK(const TopKParams& params, const float* scores, int64_t n,
                int32_t* idx, float* w, int num_threads);

// Token-major capacity: slot (t, j) is admitted while its expert holds fewer
// than `capacity` assignments; a dropped slot gets w = 0 and kept = 0.
// `load` is a workspace of num_experts counters. Returns slots dropped.
int64_t ApplyCapacity(int64_t n, int64_t k, int64_t num_experts,
                      int64_t capacity, const int32_t* idx, float* w,
                      uint8_t* kept, int64_t* load);

// w[t][:] /= RouteNormDenominator(sum(w[t][:]), norm_min) when `normalize`
// (sum + 1e-20, or max(sum, norm_min) when norm_min > 0); then w *= scale.
void NormalizeAndScale(int64_t n, int64_t k, bool normalize, float scale,
                       float* w, float norm_min = 0.0f);

// gpt-oss: each token's k chosen logits w[t][:] (as SelectTopK gives them
// from the logits, descending) become their softmax over those k.
void SoftmaxOverChosen(int64_t n, int64_t k, float* w);

// logits[0..count) = cap * tanh(logits / cap) (cap > 0; Grok-1).
void SoftcapLogits(int64_t count, float cap, float* logits);

// PhiMoE's sparsemixer (kernels/routing_rule.h SparsemixerRow) over the
// [n, E] logits: idx, w [n, 2], final weights.
void Sparsemixer(const float* logits, int64_t n, int64_t num_experts, float eps,
                 int32_t* idx, float* w, int num_threads);

// Hash routing: token t's experts are row tid2eid[token_ids[t]] ([V, k]
// table, ids in [0, num_experts)) in stored order, w = scores at those ids.
// The caller has checked every token id in [0, V).
void SelectHashed(const int32_t* tid2eid, const int64_t* token_ids,
                  const float* scores, int64_t n, int64_t num_experts,
                  int64_t k, int32_t* idx, float* w);

// Expert choice: for every expert, softmax of its logits over the n tokens
// and the `capacity` tokens with the highest probability (ties to the lower
// token id), descending: tokens[e][j], probs[e][j].
void ExpertChoiceSelect(const float* logits, int64_t n, int64_t num_experts,
                        int64_t capacity, int32_t* tokens, float* probs,
                        int num_threads);

}  // namespace moe::kernels::cpu

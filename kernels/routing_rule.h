// The routing rules that the CPU kernels (kernels/cpu/routing.cc) and the
// fused CUDA kernel (kernels/cuda/routing.cu) must apply alike, written once
// (docs/architecture.md section 3.1). Plain C++ that nvcc compiles for the
// device too; no CUDA types, so the CPU build and its tests include it.
//
// NaN:
//  - a NaN logit counts as -inf: its softmax or sigmoid score is 0 (unless
//    every logit of the token is -inf or NaN: softmax is then NaN for all);
//  - a NaN choice score (score + bias) ranks as -inf: below every number, so
//    a NaN expert is chosen only when fewer than k others are left, and
//    then by the tie rule; when all are NaN the token gets experts 0..k-1;
//  - group scores (top-2 sum or max) are taken over the ranked keys, so a
//    NaN never wins a group.
// Ties: equal keys go to the lower index (expert id, or group id).
// Weights are the unbiased scores of the chosen experts, NaN included: a NaN
// weight makes the step's output non-finite, which is refused, never hidden.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace moe::kernels {

// A logit as the score functions see it: NaN -> -inf.
MOE_HOST_DEVICE inline float RouteLogit(float logit) {
  return logit != logit ? -__builtin_huge_valf() : logit;
}

// The ranking key of a choice score (or a group score): NaN -> -inf.
MOE_HOST_DEVICE inline float RouteKey(float score) {
  return score != score ? -__builtin_huge_valf() : score;
}

// Whether key `a` of index `ia` ranks before key `b` of index `ib`: larger
// key first, ties to the lower index. Keys come from RouteKey (never NaN).
MOE_HOST_DEVICE inline bool RanksBefore(float a, int64_t ia, float b,
                                        int64_t ib) {
  return a > b || (a == b && ia < ib);
}

// DeepSeek-V4's score: sqrt(softplus(logit)), softplus computed stably as
// max(l, 0) + log1p(exp(-|l|)) (no overflow for large logits). A NaN logit
// counts as -inf (score 0), like the other score functions.
MOE_HOST_DEVICE inline float SqrtSoftplus(float logit) {
  const float l = RouteLogit(logit);
  const float a = l < 0.0f ? -l : l;
  const float sp = (l > 0.0f ? l : 0.0f) + log1pf(expf(-a));
  return sqrtf(sp);
}

// The renormalisation denominator of a token's k weights summing to `sum`:
// sum + 1e-20, or max(sum, norm_min) when norm_min > 0 (ERNIE 4.5's
// moe_norm_min, without the epsilon).
MOE_HOST_DEVICE inline float RouteNormDenominator(float sum, float norm_min) {
  return norm_min > 0.0f ? (sum > norm_min ? sum : norm_min) : sum + 1e-20f;
}

// The per-token steps after the choice, shared by the CPU kernels
// (kernels/cpu/routing.cc) and the fused CUDA kernel: one token's k slots.

// gpt-oss: the k chosen logits w[0..k) become their softmax over those k
// only. A NaN logit counts as -inf (weight 0).
MOE_HOST_DEVICE inline void SoftmaxOverChosenRow(float* w, int64_t k) {
  float m = -__builtin_huge_valf();
  for (int64_t j = 0; j < k; ++j) {
    const float l = RouteLogit(w[j]);
    m = l > m ? l : m;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    w[j] = expf(RouteLogit(w[j]) - m);
    sum += w[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < k; ++j) w[j] *= inv;
}

// w[0..k) /= RouteNormDenominator(sum, norm_min) when `normalize`; then
// w *= scale.
MOE_HOST_DEVICE inline void NormalizeAndScaleRow(float* w, int64_t k,
                                                 bool normalize, float scale,
                                                 float norm_min) {
  if (normalize) {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += w[j];
    const float denom = RouteNormDenominator(sum, norm_min);
    for (int64_t j = 0; j < k; ++j) w[j] /= denom;
  }
  for (int64_t j = 0; j < k; ++j) w[j] *= scale;
}

// Hash routing: the token's experts are its table row `row` ([k] ids in
// [0, E), checked at load) in stored order; w = its scores s [E] there.
MOE_HOST_DEVICE inline void HashedRow(const int32_t* row, const float* s,
                                      int64_t k, int32_t* idx, float* w) {
  for (int64_t j = 0; j < k; ++j) {
    idx[j] = row[j];
    w[j] = s[row[j]];
  }
}

// Grok-1's router soft-cap: c * tanh(logit / c), applied after the router
// bias and before the score function when c > 0. A NaN stays NaN (and then
// counts as -inf, RouteLogit).
MOE_HOST_DEVICE inline float SoftcapLogit(float logit, float cap) {
  return cap * tanhf(logit / cap);
}

// Whether sparsemixer's round with best logit `m` drops logit `s`: its gap
// (m - s) / max(|s|, m) exceeds 2 * eps (PhiMoE, inference semantics). A
// -inf logit gives inf / inf = NaN, which is no drop: its exp is 0 anyway.
MOE_HOST_DEVICE inline bool SparsemixerDrops(float m, float s, float eps) {
  const float a = s < 0.0f ? -s : s;
  const float factor = a > m ? a : m;
  return (m - s) / factor > 2.0f * eps;
}

// PhiMoE's sparsemixer at inference over one token's E logits: two rounds,
// each choosing the best logit left (ties to the lower id, NaN as -inf) and
// weighting it by its softmax over the logits its round keeps. Round 1
// keeps every logit within the gap of its best; round 2 also drops round
// 1's choice. idx[0..2), w[0..2); the weights are final (no renorm).
MOE_HOST_DEVICE inline void SparsemixerRow(const float* logits, int64_t E,
                                           float eps, int32_t* idx, float* w) {
  int64_t first = -1;
  for (int64_t round = 0; round < 2; ++round) {
    int64_t best = -1;
    float m = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      if (e == first) continue;
      const float l = RouteLogit(logits[e]);
      if (best < 0 || RanksBefore(l, e, m, best)) {
        best = e;
        m = l;
      }
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      if (e == first) continue;
      const float l = RouteLogit(logits[e]);
      if (!SparsemixerDrops(m, l, eps)) sum += expf(l - m);
    }
    idx[round] = static_cast<int32_t>(best);
    w[round] = 1.0f / sum;  // exp(m - m) over the kept logits' sum
    first = best;
  }
}

// The fused CUDA routing kernel's shared memory for E experts in G groups:
// scores and choice scores [E] fp32, group scores [G] fp32, taken [E] and
// kept [G] bytes, plus its fixed per-block arrays. A kernel may use 48 KB of
// shared memory without opting in per function (cudaFuncSetAttribute); the
// fused path stays under it, and layers that need more route on the host
// (engine/cuda/cuda_router.cc), which gives the same answers.
inline constexpr size_t kRouteStaticSharedBytes = 1024;  // >= the kernel's
inline constexpr size_t kRouteSharedLimitBytes = 48 * 1024;
constexpr size_t RouteDynamicSharedBytes(int64_t num_experts,
                                         int64_t n_groups) {
  return static_cast<size_t>(2 * num_experts + n_groups) * sizeof(float) +
         static_cast<size_t>(num_experts + n_groups);
}
constexpr bool RouteFitsSharedMemory(int64_t num_experts, int64_t n_groups) {
  return RouteDynamicSharedBytes(num_experts, n_groups) +
             kRouteStaticSharedBytes <=
         kRouteSharedLimitBytes;
}

}  // namespace moe::kernels

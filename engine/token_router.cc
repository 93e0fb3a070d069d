#include "engine/token_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/grouped_swiglu.h"
#include "kernels/cpu/routing.h"

namespace moe {
namespace {

namespace kc = kernels::cpu;

}  // namespace

void Routing::Reset(int64_t n, int64_t s, int64_t num_experts) {
  tokens = n;
  slots = s;
  expert.assign(n * s, -1);
  weight.assign(n * s, 0.0f);
  dispatched.assign(n * s, 0);
  expert_counts.assign(num_experts, 0);
  dropped = 0;
}

void TokenRouter::Logits(const LayerWeights& w, const float* x, int64_t n,
                         int num_threads) {
  const int64_t E = w.config.num_experts, H = w.config.hidden;
  logits_.resize(n * E);
  x_rows_.resize(n);
  logit_rows_.resize(n);
  for (int64_t t = 0; t < n; ++t) {
    x_rows_[t] = x + t * H;
    logit_rows_[t] = logits_.data() + t * E;
  }
  kc::ParallelGemm(x_rows_.data(), n, H, w.gate.ptr(), w.gate.format, E,
                   logit_rows_.data(), num_threads);
}

void TokenRouter::TokenChoice(const MoeLayerConfig& c, const float* bias,
                              const float* logits, int64_t n,
                              absl::Span<const int64_t> ends, int num_threads,
                              Routing* out) {
  const int64_t E = c.num_experts, k = c.top_k;
  scores_.resize(n * E);
  kc::ComputeScores(c.score_func == ScoreFunc::kSigmoid ? kc::kScoreSigmoid
                                                        : kc::kScoreSoftmax,
                    logits, n, E, scores_.data(), num_threads);
  kc::TopKParams p;
  p.num_experts = E;
  p.top_k = k;
  p.expert_bias = c.use_bias ? bias : nullptr;
  p.n_groups = c.n_groups;
  p.topk_groups = c.topk_groups;
  p.group_score =
      c.group_score == GroupScore::kMax ? kc::kGroupMax : kc::kGroupTop2Sum;
  out->Reset(n, k, E);
  kc::SelectTopK(p, scores_.data(), n, out->expert.data(), out->weight.data(),
                 num_threads);
  std::fill(out->dispatched.begin(), out->dispatched.end(), uint8_t{1});
  if (c.capacity_factor > 0.0) {
    load_.resize(E);
    int64_t begin = 0;
    for (int64_t end : ends) {
      const int64_t cap = TokenChoiceCapacity(c, end - begin);
      out->dropped += kc::ApplyCapacity(
          end - begin, k, E, cap, out->expert.data() + begin * k,
          out->weight.data() + begin * k, out->dispatched.data() + begin * k,
          load_.data());
      begin = end;
    }
  }
  kc::NormalizeAndScale(n, k, c.route_norm, c.route_scale, out->weight.data());
}

void TokenRouter::ExpertChoice(const MoeLayerConfig& c, const float* logits,
                               int64_t n, absl::Span<const int64_t> ends,
                               int num_threads, Routing* out) {
  const int64_t E = c.num_experts;
  // Pass 1: every segment's choices, and how many experts took each token.
  per_token_.assign(n, 0);
  int64_t total = 0;
  for (int64_t begin = 0, s = 0; s < static_cast<int64_t>(ends.size()); ++s) {
    total += E * ExpertChoiceCapacity(c, ends[s] - begin);
    begin = ends[s];
  }
  ec_tokens_.resize(total);
  ec_probs_.resize(total);
  int64_t at = 0;
  int64_t begin = 0;
  for (int64_t end : ends) {
    const int64_t cap = ExpertChoiceCapacity(c, end - begin);
    if (cap > 0) {
      kc::ExpertChoiceSelect(logits + begin * E, end - begin, E, cap,
                             ec_tokens_.data() + at, ec_probs_.data() + at,
                             num_threads);
      for (int64_t i = at; i < at + E * cap; ++i) {
        ec_tokens_[i] += static_cast<int32_t>(begin);
        ++per_token_[ec_tokens_[i]];
      }
    }
    at += E * cap;
    begin = end;
  }
  const int64_t slots =
      n == 0 ? 0 : *std::max_element(per_token_.begin(), per_token_.end());
  out->Reset(n, slots, E);
  // Pass 2: fill slots by ascending expert id; [E, cap] blocks are
  // expert-major within each segment, and segments hold disjoint tokens.
  std::fill(per_token_.begin(), per_token_.end(), 0);
  at = 0;
  begin = 0;
  for (int64_t end : ends) {
    const int64_t cap = ExpertChoiceCapacity(c, end - begin);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t j = 0; j < cap; ++j) {
        const int64_t i = at + e * cap + j;
        const int64_t t = ec_tokens_[i];
        const int64_t slot = t * slots + per_token_[t]++;
        out->expert[slot] = static_cast<int32_t>(e);
        out->weight[slot] = ec_probs_[i];
        out->dispatched[slot] = 1;
      }
    }
    at += E * cap;
    begin = end;
  }
  for (int64_t t = 0; t < n; ++t) {
    float* wt = out->weight.data() + t * slots;
    float sum = 0.0f;
    for (int64_t s = 0; s < slots; ++s) sum += wt[s];
    const float denom = sum + 1e-9f;
    for (int64_t s = 0; s < slots; ++s) wt[s] = wt[s] / denom * c.route_scale;
  }
}

absl::Status TokenRouter::Route(const LayerWeights& w, const float* x,
                                int64_t n,
                                absl::Span<const int64_t> segment_ends,
                                int num_threads, Routing* out) {
  if (!w.has_gate) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", w.layer, " was loaded without its gate"));
  }
  Logits(w, x, n, num_threads);
  return RouteLogits(w.config, w.expert_bias.data(), logits_.data(), n,
                     segment_ends, num_threads, out);
}

absl::Status TokenRouter::RouteLogits(const MoeLayerConfig& config,
                                      const float* expert_bias,
                                      const float* logits, int64_t n,
                                      absl::Span<const int64_t> segment_ends,
                                      int num_threads, Routing* out) {
  const int64_t whole[] = {n};
  if (segment_ends.empty()) segment_ends = whole;
  int64_t prev = 0;
  for (int64_t end : segment_ends) {
    if (end < prev || end > n) {
      return absl::InvalidArgumentError("segment ends must ascend within n");
    }
    prev = end;
  }
  if (prev != n) {
    return absl::InvalidArgumentError("the last segment must end at n");
  }
  if (config.routing == RoutingMode::kExpertChoice) {
    ExpertChoice(config, logits, n, segment_ends, num_threads, out);
  } else {
    TokenChoice(config, expert_bias, logits, n, segment_ends, num_threads, out);
  }
  for (int64_t i = 0; i < n * out->slots; ++i) {
    if (out->dispatched[i]) ++out->expert_counts[out->expert[i]];
  }
  return absl::OkStatus();
}

}  // namespace moe

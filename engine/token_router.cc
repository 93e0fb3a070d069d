#include "engine/token_router.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/expert_frame.h"
#include "kernels/cpu/grouped_swiglu.h"
#include "kernels/cpu/routing.h"

namespace moe {
namespace {

namespace kc = kernels::cpu;

// The logits to score: `logits` (the gate's, router bias added) with the
// rows of the caller's kLogits segments in their place, in `merged`.
absl::StatusOr<const float*> MergeCallerLogits(const MoeLayerConfig& c,
                                               const CallerOverrides& caller,
                                               absl::Span<const int64_t> ends,
                                               const float* logits, int64_t n,
                                               std::vector<float>* merged) {
  const int64_t E = c.router_rows();
  if (caller.route.size() != ends.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("caller routing: ", caller.route.size(),
                     " segment sources for ", ends.size(), " segments"));
  }
  merged->assign(logits, logits + n * E);
  int64_t begin = 0;
  for (size_t s = 0; s < ends.size(); ++s) {
    if (caller.route[s] == RouteSource::kRouting &&
        c.routing == RoutingMode::kExpertChoice) {
      return absl::InvalidArgumentError(
          "routing: the layer is routed by expert choice, where a token has "
          "no k slots of its own to send");
    }
    if (caller.route[s] == RouteSource::kLogits) {
      std::copy(caller.logits + begin * E, caller.logits + ends[s] * E,
                merged->data() + begin * E);
    }
    begin = ends[s];
  }
  return merged->data();
}

}  // namespace

void Routing::Reset(int64_t n, int64_t s, int64_t num_experts) {
  tokens = n;
  slots = s;
  expert.assign(n * s, -1);
  weight.assign(n * s, 0.0f);
  dispatched.assign(n * s, 0);
  expert_counts.assign(num_experts, 0);
  dropped = 0;
  zero_slots = 0;
}

namespace {

// Counts the dispatched slots per expert and the zero-expert slots; a slot
// of a zero expert (id >= E) is never dispatched.
void CountSlots(Routing* out) {
  const int64_t E = static_cast<int64_t>(out->expert_counts.size());
  std::fill(out->expert_counts.begin(), out->expert_counts.end(), 0);
  out->zero_slots = 0;
  for (int64_t i = 0; i < out->tokens * out->slots; ++i) {
    if (out->expert[i] >= E) {
      out->dispatched[i] = 0;
      ++out->zero_slots;
    } else if (out->dispatched[i]) {
      ++out->expert_counts[out->expert[i]];
    }
  }
}

}  // namespace

void AddZeroExperts(const MoeLayerConfig& c, const Routing& r, const float* x,
                    float* y) {
  if (c.zero_experts == 0) return;
  const int64_t E = c.num_experts, H = c.hidden, S = r.slots;
  for (int64_t t = 0; t < r.tokens; ++t) {
    for (int64_t j = 0; j < S; ++j) {
      const int64_t i = t * S + j;
      if (r.expert[i] < E) continue;
      const float w = r.weight[i];
      const float* xt = x + t * H;
      float* yt = y + t * H;
      for (int64_t h = 0; h < H; ++h) yt[h] += w * xt[h];
    }
  }
}

void ScaleAndBiasOutput(const MoeLayerConfig& c, const float* output_bias,
                        int64_t n, float* y, float* separate) {
  const int64_t H = c.hidden;
  if (c.output_scale != 1.0f) {
    const float s = c.output_scale;
    for (int64_t i = 0; i < n * H; ++i) y[i] *= s;
    if (separate != nullptr) {
      for (int64_t i = 0; i < n * H; ++i) separate[i] *= s;
    }
  }
  if (c.output_bias && output_bias != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < H; ++h) y[t * H + h] += output_bias[h];
    }
  }
}

bool HasOutputTerms(const MoeLayerConfig& c) {
  return c.zero_experts > 0 || c.output_scale != 1.0f || c.output_bias;
}

void TokenRouter::Logits(const LayerWeights& w, const float* x, int64_t n,
                         int num_threads) {
  // The router's rows: the routed experts' and the zero experts'.
  const int64_t E = w.config.router_rows(), H = w.config.hidden;
  if (w.config.router_prenorm) {
    // Gemma 4: the gate reads rms(x) * scale * H^-0.5.
    prenormed_.resize(n * H);
    RmsNormRows(x, n, H, w.config.norm_eps, w.gate_scale.data(),
                1.0f / std::sqrt(static_cast<float>(H)), prenormed_.data());
    x = prenormed_.data();
  }
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

void TokenRouter::TokenChoice(const MoeLayerConfig& c,
                              const RouteTables& tables, const float* logits,
                              const RouteRows& rows, int num_threads,
                              Routing* out) {
  // Scores and choice run over the E + Z router rows; only ids below E are
  // dispatched (CountSlots).
  const int64_t n = rows.n, E = c.router_rows(), k = c.top_k;
  const absl::Span<const int64_t> ends = rows.segment_ends;
  const absl::Span<const RouteSource> route =
      AnyCallerRoute(rows.caller) ? rows.caller->route
                                  : absl::Span<const RouteSource>();
  out->Reset(n, k, c.num_experts);
  if (c.score_func == ScoreFunc::kSparsemixer) {
    // PhiMoE: two masked-softmax rounds over the logits; final weights.
    kc::Sparsemixer(logits, n, E, c.jitter_eps, out->expert.data(),
                    out->weight.data(), num_threads);
  } else if (c.score_func == ScoreFunc::kTopkSoftmax) {
    // gpt-oss: the k largest logits, then softmax over those k only.
    kc::TopKParams p;
    p.num_experts = E;
    p.top_k = k;
    kc::SelectTopK(p, logits, n, out->expert.data(), out->weight.data(),
                   num_threads);
    kc::SoftmaxOverChosen(n, k, out->weight.data());
  } else {
    scores_.resize(n * E);
    const kc::ScoreFuncId f =
        c.score_func == ScoreFunc::kSigmoid        ? kc::kScoreSigmoid
        : c.score_func == ScoreFunc::kSqrtSoftplus ? kc::kScoreSqrtSoftplus
                                                   : kc::kScoreSoftmax;
    kc::ComputeScores(f, logits, n, E, scores_.data(), num_threads);
    if (c.hash_routed()) {
      kc::SelectHashed(tables.tid2eid, rows.token_ids.data(), scores_.data(), n,
                       E, k, out->expert.data(), out->weight.data());
    } else {
      kc::TopKParams p;
      p.num_experts = E;
      p.top_k = k;
      p.expert_bias = c.use_bias ? tables.expert_bias : nullptr;
      p.n_groups = c.n_groups;
      p.topk_groups = c.topk_groups;
      p.group_score =
          c.group_score == GroupScore::kMax ? kc::kGroupMax : kc::kGroupTop2Sum;
      kc::SelectTopK(p, scores_.data(), n, out->expert.data(),
                     out->weight.data(), num_threads);
    }
  }
  std::fill(out->dispatched.begin(), out->dispatched.end(), uint8_t{1});
  if (c.capacity_factor > 0.0) {
    load_.resize(E);
    int64_t begin = 0;
    for (size_t s = 0; s < ends.size(); ++s) {
      const int64_t end = ends[s];
      // The caller's routing has no capacity limit: ApplyCallerRouting
      // writes those rows over whatever was chosen here.
      if (!route.empty() && route[s] == RouteSource::kRouting) {
        begin = end;
        continue;
      }
      const int64_t cap = TokenChoiceCapacity(c, end - begin);
      out->dropped += kc::ApplyCapacity(
          end - begin, k, E, cap, out->expert.data() + begin * k,
          out->weight.data() + begin * k, out->dispatched.data() + begin * k,
          load_.data());
      begin = end;
    }
  }
  kc::NormalizeAndScale(n, k, c.route_norm, c.route_scale, out->weight.data(),
                        c.norm_min);
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
                                const RouteRows& rows, int num_threads,
                                Routing* out) {
  if (!w.has_gate) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", w.layer, " was loaded without its gate"));
  }
  RouteTables t;
  t.expert_bias = w.expert_bias.data();
  t.router_bias = w.router_bias.data();
  t.tid2eid = w.tid2eid.data();
  if (w.config.hash_routed() && w.tid2eid.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " is hash-routed but has no tid2eid table"));
  }
  if (w.config.router_bias && w.router_bias.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", w.layer, " was loaded without its router bias"));
  }
  if ((w.config.router_prenorm && w.gate_scale.empty()) ||
      (w.config.per_expert_scale && w.per_expert_scale.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " was loaded without its router scales"));
  }
  t.per_expert_scale = w.per_expert_scale.data();
  Logits(w, x, rows.n, num_threads);
  return RouteLogits(w.config, t, logits_.data(), rows, num_threads, out);
}

absl::Status CheckTokenIds(const MoeLayerConfig& config,
                           absl::Span<const int64_t> token_ids, int64_t n) {
  if (!config.hash_routed()) return absl::OkStatus();
  if (static_cast<int64_t>(token_ids.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_ids: the layer is hash-routed (vocabulary ", config.hash_vocab,
        ") and needs one token id per row: got ", token_ids.size(), " for ", n,
        " rows"));
  }
  for (int64_t t = 0; t < n; ++t) {
    if (token_ids[t] < 0 || token_ids[t] >= config.hash_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token_ids[", t, "] = ", token_ids[t],
          " is outside the vocabulary [0, ", config.hash_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status TokenRouter::RouteLogits(const MoeLayerConfig& config,
                                      const RouteTables& tables,
                                      const float* logits,
                                      const RouteRows& rows, int num_threads,
                                      Routing* out) {
  const int64_t n = rows.n;
  absl::Span<const int64_t> segment_ends = rows.segment_ends;
  const absl::Span<const int64_t> token_ids = rows.token_ids;
  const CallerOverrides* caller = rows.caller;
  MOE_RETURN_IF_ERROR(CheckTokenIds(config, token_ids, n));
  const int64_t E = config.router_rows();
  if (config.router_bias) {
    // gpt-oss: the bias moves the logits, so both the choice and weights.
    biased_.resize(n * E);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t e = 0; e < E; ++e) {
        biased_[t * E + e] = logits[t * E + e] + tables.router_bias[e];
      }
    }
    logits = biased_.data();
  }
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
  const bool overridden = AnyCallerRoute(caller);
  if (overridden) {
    MOE_ASSIGN_OR_RETURN(
        logits,
        MergeCallerLogits(config, *caller, segment_ends, logits, n, &merged_));
  }
  if (caller != nullptr && caller->keep_logits) {
    out->logits.assign(logits, logits + n * E);
    out->logit_cols = E;
  }
  if (config.router_softcap > 0.0f) {
    // Grok-1: c * tanh(l / c) after the bias, before the score function.
    // The kept logits are the uncapped ones a caller would send back.
    if (logits != biased_.data()) {
      biased_.assign(logits, logits + n * E);
      logits = biased_.data();
    }
    kc::SoftcapLogits(n * E, config.router_softcap, biased_.data());
  }
  if (config.routing == RoutingMode::kExpertChoice) {
    ExpertChoice(config, logits, n, segment_ends, num_threads, out);
  } else {
    // segment_ends, unlike rows.segment_ends, is never empty.
    TokenChoice(config, tables, logits,
                {.n = n,
                 .segment_ends = segment_ends,
                 .token_ids = token_ids,
                 .caller = caller},
                num_threads, out);
  }
  if (config.per_expert_scale) {
    for (int64_t i = 0; i < n * out->slots; ++i) {
      if (out->expert[i] >= 0 && out->expert[i] < config.num_experts) {
        out->weight[i] *= tables.per_expert_scale[out->expert[i]];
      }
    }
  }
  if (overridden) {
    // After the scale: the caller's weights are final. ApplyCallerRouting
    // counts every row.
    ApplyCallerRouting(*caller, segment_ends, out);
    return absl::OkStatus();
  }
  CountSlots(out);
  return absl::OkStatus();
}

void ApplyCallerRouting(const CallerOverrides& caller,
                        absl::Span<const int64_t> segment_ends, Routing* out) {
  const int64_t k = out->slots;
  const int64_t whole[] = {out->tokens};
  if (segment_ends.empty()) segment_ends = whole;
  int64_t begin = 0;
  for (size_t s = 0; s < caller.route.size() && s < segment_ends.size(); ++s) {
    const int64_t end = segment_ends[s];
    if (caller.route[s] == RouteSource::kRouting) {
      for (int64_t i = begin * k; i < end * k; ++i) {
        out->expert[i] = caller.expert[i];
        out->weight[i] = caller.weight[i];
        out->dispatched[i] = 1;
      }
    }
    begin = end;
  }
  CountSlots(out);
}

}  // namespace moe

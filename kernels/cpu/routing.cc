#include "kernels/cpu/routing.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/routing_rule.h"

namespace moe::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this many tokens a parallel region costs more than it saves.
constexpr int64_t kParallelTokens = 64;

int ThreadsFor(int64_t n, int num_threads) {
  return n >= kParallelTokens ? std::max(num_threads, 1) : 1;
}

// Index of the first key of v[0..n) not yet taken in the routing order
// (kernels/routing_rule.h: largest first, ties to the lowest index). Keys
// come from RouteKey, never NaN.
int64_t ArgMaxUntaken(const float* v, const uint8_t* taken, int64_t n) {
  int64_t best = -1;
  for (int64_t e = 0; e < n; ++e) {
    if (taken[e]) continue;
    if (best < 0 || RanksBefore(v[e], e, v[best], best)) best = e;
  }
  return best;
}

// Per-thread scratch for one token's routing.
struct TokenScratch {
  explicit TokenScratch(const TopKParams& p)
      : c(p.num_experts),
        taken(p.num_experts),
        group_score(p.n_groups),
        group_taken(p.n_groups) {}
  std::vector<float> c;
  std::vector<uint8_t> taken;
  std::vector<float> group_score;
  std::vector<uint8_t> group_taken;
};

void RouteOneToken(const TopKParams& p, const float* s, int32_t* idx, float* w,
                   TokenScratch& ws) {
  const int64_t E = p.num_experts;
  float* c = ws.c.data();
  for (int64_t e = 0; e < E; ++e) {
    c[e] = RouteKey(p.expert_bias != nullptr ? s[e] + p.expert_bias[e] : s[e]);
  }
  if (p.n_groups > 0) {
    const int64_t gs = E / p.n_groups;
    for (int64_t g = 0; g < p.n_groups; ++g) {
      const float* cg = c + g * gs;
      float a = kNegInf, b = kNegInf;  // largest, second largest
      for (int64_t i = 0; i < gs; ++i) {
        if (cg[i] > a) {
          b = a;
          a = cg[i];
        } else if (cg[i] > b) {
          b = cg[i];
        }
      }
      ws.group_score[g] = RouteKey(p.group_score == kGroupMax ? a : a + b);
    }
    std::fill(ws.group_taken.begin(), ws.group_taken.end(), uint8_t{0});
    for (int64_t j = 0; j < p.topk_groups; ++j) {
      const int64_t g = ArgMaxUntaken(ws.group_score.data(),
                                      ws.group_taken.data(), p.n_groups);
      ws.group_taken[g] = 1;
    }
    for (int64_t g = 0; g < p.n_groups; ++g) {
      if (!ws.group_taken[g]) std::fill(c + g * gs, c + (g + 1) * gs, kNegInf);
    }
  }
  std::fill(ws.taken.begin(), ws.taken.end(), uint8_t{0});
  for (int64_t j = 0; j < p.top_k; ++j) {
    const int64_t e = ArgMaxUntaken(c, ws.taken.data(), E);
    ws.taken[e] = 1;
    idx[j] = static_cast<int32_t>(e);
    w[j] = s[e];
  }
}

}  // namespace

void ComputeScores(int32_t score_func, const float* logits, int64_t n,
                   int64_t num_experts, float* scores, int num_threads) {
  const int64_t E = num_experts;
#pragma omp parallel for schedule(static) \
    num_threads(ThreadsFor(n, num_threads))
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    float* s = scores + t * E;
    if (score_func == kScoreSigmoid) {
      for (int64_t e = 0; e < E; ++e) {
        s[e] = 1.0f / (1.0f + std::exp(-RouteLogit(l[e])));
      }
      continue;
    }
    if (score_func == kScoreSqrtSoftplus) {
      for (int64_t e = 0; e < E; ++e) s[e] = SqrtSoftplus(l[e]);
      continue;
    }
    float m = kNegInf;
    for (int64_t e = 0; e < E; ++e) m = std::max(m, RouteLogit(l[e]));
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = std::exp(RouteLogit(l[e]) - m);
      sum += s[e];
    }
    const float inv = 1.0f / sum;
    for (int64_t e = 0; e < E; ++e) s[e] *= inv;
  }
}

void SelectTopK(const TopKParams& p, const float* scores, int64_t n,
                int32_t* idx, float* w, int num_threads) {
#pragma omp parallel num_threads(ThreadsFor(n, num_threads))
  {
    TokenScratch ws(p);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      RouteOneToken(p, scores + t * p.num_experts, idx + t * p.top_k,
                    w + t * p.top_k, ws);
    }
  }
}

int64_t ApplyCapacity(int64_t n, int64_t k, int64_t num_experts,
                      int64_t capacity, const int32_t* idx, float* w,
                      uint8_t* kept, int64_t* load) {
  std::fill(load, load + num_experts, int64_t{0});
  int64_t dropped = 0;
  for (int64_t i = 0; i < n * k; ++i) {
    if (load[idx[i]] < capacity) {
      ++load[idx[i]];
      kept[i] = 1;
    } else {
      kept[i] = 0;
      w[i] = 0.0f;
      ++dropped;
    }
  }
  return dropped;
}

void NormalizeAndScale(int64_t n, int64_t k, bool normalize, float scale,
                       float* w, float norm_min) {
  for (int64_t t = 0; t < n; ++t) {
    NormalizeAndScaleRow(w + t * k, k, normalize, scale, norm_min);
  }
}

void SoftmaxOverChosen(int64_t n, int64_t k, float* w) {
  for (int64_t t = 0; t < n; ++t) SoftmaxOverChosenRow(w + t * k, k);
}

void SoftcapLogits(int64_t count, float cap, float* logits) {
  for (int64_t i = 0; i < count; ++i) {
    logits[i] = SoftcapLogit(logits[i], cap);
  }
}

void Sparsemixer(const float* logits, int64_t n, int64_t num_experts, float eps,
                 int32_t* idx, float* w, int num_threads) {
#pragma omp parallel for schedule(static) \
    num_threads(ThreadsFor(n, num_threads))
  for (int64_t t = 0; t < n; ++t) {
    SparsemixerRow(logits + t * num_experts, num_experts, eps, idx + t * 2,
                   w + t * 2);
  }
}

void SelectHashed(const int32_t* tid2eid, const int64_t* token_ids,
                  const float* scores, int64_t n, int64_t num_experts,
                  int64_t k, int32_t* idx, float* w) {
  for (int64_t t = 0; t < n; ++t) {
    HashedRow(tid2eid + token_ids[t] * k, scores + t * num_experts, k,
              idx + t * k, w + t * k);
  }
}

void ExpertChoiceSelect(const float* logits, int64_t n, int64_t num_experts,
                        int64_t capacity, int32_t* tokens, float* probs,
                        int num_threads) {
  const int64_t E = num_experts;
  const int64_t C = std::min(capacity, n);
#pragma omp parallel num_threads(ThreadsFor(n* E / 8, num_threads))
  {
    std::vector<float> col(n);
    std::vector<int32_t> order(n);
#pragma omp for schedule(static)
    for (int64_t e = 0; e < E; ++e) {
      float m = kNegInf;
      for (int64_t t = 0; t < n; ++t) m = std::max(m, logits[t * E + e]);
      float sum = 0.0f;
      for (int64_t t = 0; t < n; ++t) {
        col[t] = std::exp(logits[t * E + e] - m);
        sum += col[t];
      }
      const float inv = 1.0f / sum;
      // NaN (from overflowing logits) sorts last instead of breaking the
      // comparator's strict weak order.
      for (int64_t t = 0; t < n; ++t) {
        col[t] = std::isnan(col[t]) ? -1.0f : col[t] * inv;
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + C, order.end(),
                        [&](int32_t a, int32_t b) {
                          return col[a] != col[b] ? col[a] > col[b] : a < b;
                        });
      for (int64_t j = 0; j < C; ++j) {
        tokens[e * C + j] = order[j];
        probs[e * C + j] = col[order[j]];
      }
    }
  }
}

}  // namespace moe::kernels::cpu

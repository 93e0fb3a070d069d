// Golden edge cases of the NaN and tie rules (kernels/routing_rule.h), one
// token each, with the experts and unnormalised weights (w = s[idx]) written
// out by hand. The CPU kernels (tests/kernels/cpu/routing_test.cc) and the
// CUDA kernel (tests/kernels/cuda/cuda_kernels_test.cc) must both give them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace moe::testing {

struct RouteEdgeCase {
  std::string name;
  int32_t num_experts = 0, top_k = 0;
  int32_t score_func = 0;  // 0 softmax, 1 sigmoid (both kernels' ids)
  int32_t n_groups = 0, topk_groups = 0;
  int32_t group_score = 0;  // 0 top-2 sum, 1 max
  std::vector<float> logits;
  std::vector<float> bias;  // empty: none
  std::vector<int32_t> idx;
  std::vector<float> w;  // NaN where the weight must be NaN
};

inline std::vector<RouteEdgeCase> RouteEdgeCases() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto sig = [](double x) {
    return static_cast<float>(1 / (1 + std::exp(-x)));
  };
  const double d = std::exp(0.5) + std::exp(2.0) + std::exp(1.0) + 1;
  std::vector<RouteEdgeCase> cases;
  // A NaN logit is -inf: score 0, never chosen over a number.
  cases.push_back({"softmax_nan_logit",
                   6,
                   2,
                   0,
                   0,
                   0,
                   0,
                   {0.5f, nan, 2.0f, 1.0f, nan, 0.0f},
                   {},
                   {2, 3},
                   {static_cast<float>(std::exp(2.0) / d),
                    static_cast<float>(std::exp(1.0) / d)}});
  // Every logit NaN: every score NaN, experts 0..k-1, NaN weights.
  cases.push_back({"softmax_all_nan",
                   4,
                   2,
                   0,
                   0,
                   0,
                   0,
                   {nan, nan, nan, nan},
                   {},
                   {0, 1},
                   {nan, nan}});
  // +inf logit: inf - inf, every score NaN, as above.
  cases.push_back({"softmax_inf_logit",
                   4,
                   2,
                   0,
                   0,
                   0,
                   0,
                   {1.0f, inf, 0.0f, 2.0f},
                   {},
                   {0, 1},
                   {nan, nan}});
  // Sigmoid with bias: NaN logits score 0 (the bias still chooses expert 0,
  // tied with expert 1 at 0.5: the lower id); a NaN bias ranks last.
  cases.push_back({"sigmoid_bias_nan",
                   6,
                   3,
                   1,
                   0,
                   0,
                   0,
                   {nan, 0.0f, 1.0f, nan, 2.0f, -1.0f},
                   {0.5f, 0.0f, 0.0f, 0.0f, 0.0f, nan},
                   {4, 2, 0},
                   {sig(2), sig(1), 0.0f}});
  // Every choice score NaN (NaN bias): experts 0..k-1 by the tie rule.
  cases.push_back({"sigmoid_bias_all_nan",
                   4,
                   2,
                   1,
                   0,
                   0,
                   0,
                   {nan, 1.0f, nan, 2.0f},
                   {nan, nan, nan, nan},
                   {0, 1},
                   {0.0f, sig(1)}});
  // Groups of 2, best 2 by top-2 sum: expert 6's NaN bias makes group 3's
  // sum -inf, so groups 1 and 2 stay; experts 2 and 3 tie (lower id wins).
  cases.push_back({"sigmoid_groups_nan_bias",
                   8,
                   2,
                   1,
                   4,
                   2,
                   0,
                   {nan, nan, 0.0f, 0.0f, 1.0f, nan, 3.0f, -2.0f},
                   {0, 0, 0, 0, 0, 0, nan, 0},
                   {4, 2},
                   {sig(1), 0.5f}});
  // The same by group max: group 3's max is expert 7's sig(-2) and group 2
  // (sig(1)) and group 1 (0.5) win; then 4 before 2.
  cases.push_back({"sigmoid_groups_max_nan_bias",
                   8,
                   2,
                   1,
                   4,
                   2,
                   1,
                   {nan, nan, 0.0f, 0.0f, 1.0f, nan, 3.0f, -2.0f},
                   {0, 0, 0, 0, 0, 0, nan, 0},
                   {4, 2},
                   {sig(1), 0.5f}});
  return cases;
}

// Bitwise-NaN-aware closeness of one weight.
inline bool WeightMatches(float got, float want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= 1e-6f * (1 + std::fabs(want));
}

}  // namespace moe::testing

// The routing shapes of the late-2026 MoE models, at small hidden sizes so
// that the naive reference (tests/testutil/reference_moe.h) stays cheap:
// many experts (a count that is not a power of two among them) and many
// slots per token. The engine has no fixed bound on either; these hold it to
// that where a fixed-size buffer or table would show first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/moe_config.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {

struct ManyExpertsShape {
  std::string name;
  MoeLayerConfig config;
};

inline std::vector<ManyExpertsShape> ManyExpertsShapes() {
  MoeLayerConfig base;
  base.hidden = 37;
  base.inter = 11;
  std::vector<ManyExpertsShape> out;
  {
    // Nemotron 3 Super: DeepSeek-V3 routing (sigmoid, correction bias for
    // the choice, 8 groups keeping 4 by their top-2 sum, renormalised,
    // routed_scaling_factor) over 512 experts, top-22.
    MoeLayerConfig c = base;
    c.num_experts = 512;
    c.top_k = 22;
    c.score_func = ScoreFunc::kSigmoid;
    c.use_bias = true;
    c.n_groups = 8;
    c.topk_groups = 4;
    c.group_score = GroupScore::kTop2Sum;
    c.route_norm = true;
    c.route_scale = 2.5f;
    out.push_back({"nemotron3_super_like", c});
  }
  {
    // Kimi K3: 896 experts (not a power of two), top-16, sigmoid with the
    // correction bias, no groups.
    MoeLayerConfig c = base;
    c.num_experts = 896;
    c.top_k = 16;
    c.score_func = ScoreFunc::kSigmoid;
    c.use_bias = true;
    c.route_norm = true;
    c.route_scale = 2.827f;
    out.push_back({"kimi_k3_like", c});
  }
  {
    // Softmax over 640 experts, top-22.
    MoeLayerConfig c = base;
    c.num_experts = 640;
    c.top_k = 22;
    c.score_func = ScoreFunc::kSoftmax;
    c.route_norm = true;
    out.push_back({"softmax_640_like", c});
  }
  return out;
}

// Makes expert `hot` the first choice of every token from `first` on: one
// input channel those tokens share (x[t][0] = 3) that only the hot expert's
// gate row weighs heavily (gate[hot][0] = 3), so its logit is about 9 above
// the others'. Then recomputes the reference's outputs.
inline void MakeExpertHot(GoldenCase& c, int64_t hot, int64_t first = 0) {
  const int64_t H = c.config.hidden;
  for (int64_t t = first; t < c.tokens; ++t) c.x[t * H] = 3.0f;
  c.gate[hot * H] = 3.0f;
  RunReferenceMoe(c);
}

}  // namespace moe::testing

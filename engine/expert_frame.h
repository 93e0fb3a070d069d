// The frame around a layer's routed experts when they do not read the
// layer's rows as they are: LatentMoE (Nemotron 3, Kimi K3) projects x to a
// narrower latent width before dispatch and the experts' weighted sum back
// to H after the combine (with an RMSNorm on the sum under latent_norm);
// Gemma 4 puts an RMSNorm before the experts and one after their sum. The
// router applies the frame, so the expert-parallel step, the wire and the
// workers carry rows of config.expert_width() only. The shared expert's own
// pre- and post-norms (Gemma 4) are here too.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/layer_weights.h"

namespace moe {

// out[t] = x[t] * (mean(x[t]^2) + eps)^-0.5 * weight * factor for n rows of
// width `width` (weight null: 1). The mean accumulates in double, so the
// result is the fp32 rounding of the exact norm for these sizes. `out` may
// be `x`.
void RmsNormRows(const float* x, int64_t n, int64_t width, float eps,
                 const float* weight, float factor, float* out);

class ExpertFrame {
 public:
  // The rows [n, expert_width] the routed experts read for x [n, H]: x itself
  // for a layer without a frame, else rows in this frame's buffer (valid
  // until the next Enter).
  absl::StatusOr<const float*> Enter(const LayerWeights& w, const float* x,
                                     int64_t n, int num_threads);
  // Computes y [n, H] = the layer's routed output for the experts' weighted sum
  // s [n, expert_width] (s is overwritten under latent_norm).
  absl::Status Leave(const LayerWeights& w, float* s, int64_t n, float* y,
                     int num_threads);

 private:
  std::vector<float> rows_;
  std::vector<const float*> in_rows_;
  std::vector<float*> out_rows_;
};

// Checks whether `w` holds every frame tensor its config needs (router side).
absl::Status CheckFrameLoaded(const LayerWeights& w);

}  // namespace moe

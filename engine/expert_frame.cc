#include "engine/expert_frame.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cpu/grouped_swiglu.h"

namespace moe {
namespace {
namespace kc = kernels::cpu;

// out rows = a W^T over `n` rows of width `k` for a packed [n_out, k] weight.
void Project(const float* a, int64_t n, int64_t k, const PackedWeight& w,
             float* out, std::vector<const float*>& in_rows,
             std::vector<float*>& out_rows, int num_threads) {
  in_rows.resize(n);
  out_rows.resize(n);
  for (int64_t t = 0; t < n; ++t) {
    in_rows[t] = a + t * k;
    out_rows[t] = out + t * w.n;
  }
  kc::ParallelGemm(in_rows.data(), n, k, w.ptr(), w.format, w.n,
                   out_rows.data(), num_threads);
}

void AddBias(const std::vector<float>& b, int64_t n, float* rows) {
  const int64_t width = static_cast<int64_t>(b.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < width; ++i) rows[t * width + i] += b[i];
  }
}

}  // namespace

void RmsNormRows(const float* x, int64_t n, int64_t width, float eps,
                 const float* weight, float factor, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* v = x + t * width;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(v[i]) * v[i];
    const float inv = static_cast<float>(
        1.0 / std::sqrt(sum / static_cast<double>(width) + eps));
    float* o = out + t * width;
    for (int64_t i = 0; i < width; ++i) {
      const float s = v[i] * inv;
      o[i] = (weight != nullptr ? s * weight[i] : s) * factor;
    }
  }
}

absl::Status CheckFrameLoaded(const LayerWeights& w) {
  const MoeLayerConfig& c = w.config;
  const bool missing =
      (c.latent > 0 && (w.latent_w1.n == 0 || w.latent_w2.n == 0)) ||
      (c.latent_bias && (w.latent_b1.empty() || w.latent_b2.empty())) ||
      (c.latent_norm && w.latent_norm.empty()) ||
      (c.branch_norms &&
       (w.experts_in_norm.empty() || w.experts_out_norm.empty()));
  if (missing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " was loaded without its latent or norm weights"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> ExpertFrame::Enter(const LayerWeights& w,
                                                const float* x, int64_t n,
                                                int num_threads) {
  const MoeLayerConfig& c = w.config;
  if (!c.has_expert_frame()) return x;
  if (absl::Status s = CheckFrameLoaded(w); !s.ok()) return s;
  const int64_t H = c.hidden, W = c.expert_width();
  if (rows_.size() < static_cast<size_t>(n * W)) rows_.resize(n * W);
  if (c.latent > 0) {
    Project(x, n, H, w.latent_w1, rows_.data(), in_rows_, out_rows_,
            num_threads);
    if (c.latent_bias) AddBias(w.latent_b1, n, rows_.data());
  } else {
    RmsNormRows(x, n, H, c.norm_eps, w.experts_in_norm.data(), 1.0f,
                rows_.data());
  }
  return rows_.data();
}

absl::Status ExpertFrame::Leave(const LayerWeights& w, float* s, int64_t n,
                                float* y, int num_threads) {
  const MoeLayerConfig& c = w.config;
  if (!c.has_expert_frame()) {
    return absl::FailedPreconditionError("the layer has no expert frame");
  }
  MOE_RETURN_IF_ERROR(CheckFrameLoaded(w));
  const int64_t H = c.hidden, W = c.expert_width();
  if (c.latent > 0) {
    if (c.latent_norm) {
      RmsNormRows(s, n, W, c.norm_eps, w.latent_norm.data(), 1.0f, s);
    }
    Project(s, n, W, w.latent_w2, y, in_rows_, out_rows_, num_threads);
    if (c.latent_bias) AddBias(w.latent_b2, n, y);
  } else {
    RmsNormRows(s, n, H, c.norm_eps, w.experts_out_norm.data(), 1.0f, y);
  }
  return absl::OkStatus();
}

}  // namespace moe

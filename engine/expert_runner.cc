#include "engine/expert_runner.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/expert_frame.h"

namespace moe {
namespace {
namespace kc = kernels::cpu;

// An activation (GatedActOf or SharedGatedActOf of the layer) on a
// problem.
void SetActivation(const MoeLayerConfig& c, const kernels::GatedActParams& a,
                   kc::GroupedSwiglu* p) {
  p->act = a.act;
  p->act_alpha = a.alpha;
  p->act_limit = a.limit;
  p->act_beta = a.beta;
  p->act_linear_beta = a.linear_beta;
  p->gated = c.gated;
}
}  // namespace

void ExpertRunner::Run(const kc::GroupedSwiglu& p, int num_threads) {
  const int64_t total = p.group_offsets[p.num_groups];
  if (total == 0) return;
  const int64_t count = kc::PlanGroupedSwiglu(p, num_threads, nullptr, 0);
  if (static_cast<int64_t>(tasks_.size()) < count) tasks_.resize(count);
  kc::PlanGroupedSwiglu(p, num_threads, tasks_.data(), count);
  const size_t h_size = static_cast<size_t>(total * kc::PaddedInter(p.inter));
  if (h_.size() < h_size) h_.resize(h_size);
  if (h_rows_.size() < static_cast<size_t>(total)) h_rows_.resize(total);
  if (!p.plain()) {
    if (gu_.size() < 2 * h_size) gu_.resize(2 * h_size);
    if (gu_rows_.size() < static_cast<size_t>(total)) gu_rows_.resize(total);
  }
  kc::RunGroupedSwiglu(p, tasks_.data(), count, h_.data(), h_rows_.data(),
                       num_threads, gu_.data(), gu_rows_.data());
}

absl::Status ExpertRunner::RunRouted(const LayerWeights& w,
                                     absl::Span<const int64_t> offsets,
                                     const float* const* in_rows,
                                     float* const* out_rows, int num_threads) {
  const int64_t groups = w.num_local_experts();
  if (static_cast<int64_t>(offsets.size()) != groups + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert offsets have ", offsets.size(),
                     " entries, expected ", groups + 1));
  }
  w13_.resize(groups);
  w2_.resize(groups);
  const bool bias = w.config.expert_bias;
  b1_.resize(bias ? groups : 0);
  b3_.resize(bias ? groups : 0);
  b2_.resize(bias ? groups : 0);
  for (int64_t g = 0; g < groups; ++g) {
    const ExpertWeights& e = w.experts[g];
    w13_[g] = e.w13.ptr();
    w2_[g] = e.w2.ptr();
    if (bias) {
      if (!e.has_bias()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "layer ", w.layer, ": expert slot ", g, " has no biases loaded"));
      }
      b1_[g] = e.b1.data();
      b3_[g] = e.b3.data();
      b2_[g] = e.b2.data();
    }
  }
  kc::GroupedSwiglu p;
  p.num_groups = groups;
  p.group_offsets = offsets.data();
  p.in_rows = in_rows;
  p.out_rows = out_rows;
  p.w13 = w13_.data();
  p.w2 = w2_.data();
  p.format =
      w.experts.empty() ? kc::WeightFormat::kF32 : w.experts.front().w13.format;
  p.hidden = w.config.expert_width();
  p.inter = w.config.inter;
  if (bias) {
    p.b1 = b1_.data();
    p.b3 = b3_.data();
    p.b2 = b2_.data();
  }
  SetActivation(w.config, GatedActOf(w.config), &p);
  Run(p, num_threads);
  return absl::OkStatus();
}

absl::Status ExpertRunner::RunShared(const LayerWeights& w, const float* x,
                                     int64_t n, float* out, int num_threads) {
  if (!w.has_shared) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", w.layer, " has no shared expert loaded"));
  }
  const int64_t H = w.config.hidden;
  const bool norms = w.config.branch_norms;
  if (norms && (w.shared_in_norm.empty() || w.shared_out_norm.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " was loaded without its shared expert's norms"));
  }
  const float* in = x;
  if (norms) {
    // Gemma 4: the dense branch reads rms(x) * its pre-norm weight.
    if (normed_.size() < static_cast<size_t>(n * H)) normed_.resize(n * H);
    RmsNormRows(x, n, H, w.config.norm_eps, w.shared_in_norm.data(), 1.0f,
                normed_.data());
    in = normed_.data();
  }
  shared_in_.resize(n);
  shared_out_.resize(n);
  for (int64_t t = 0; t < n; ++t) {
    shared_in_[t] = in + t * H;
    shared_out_[t] = out + t * H;
  }
  const int64_t offsets[2] = {0, n};
  const void* w13 = w.shared.w13.ptr();
  const void* w2 = w.shared.w2.ptr();
  kc::GroupedSwiglu p;
  p.num_groups = 1;
  p.group_offsets = offsets;
  p.in_rows = shared_in_.data();
  p.out_rows = shared_out_.data();
  p.w13 = &w13;
  p.w2 = &w2;
  p.format = w.shared.w13.format;
  p.hidden = H;
  p.inter = w.shared.inter;
  // The shared expert's own activation where the layer gives one.
  SetActivation(w.config, SharedGatedActOf(w.config), &p);
  Run(p, num_threads);
  if (norms) {
    RmsNormRows(out, n, H, w.config.norm_eps, w.shared_out_norm.data(), 1.0f,
                out);
  }
  if (w.config.shared_gate) {
    const float* g = w.shared_gate.data();
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * H;
      float dot = 0.0f;
      for (int64_t i = 0; i < H; ++i) dot += xt[i] * g[i];
      const float s = 1.0f / (1.0f + std::exp(-dot));
      float* o = out + t * H;
      for (int64_t i = 0; i < H; ++i) o[i] *= s;
    }
  }
  return absl::OkStatus();
}

}  // namespace moe

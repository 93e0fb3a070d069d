#include "tests/testutil/fp8_gpu_reference.h"

#include <cmath>
#include <map>

#include "absl/functional/function_ref.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "engine/layer_weights.h"
#include "kernels/fp8_rule.h"
#include "tests/testutil/compare.h"

namespace moe::testing {
namespace {

namespace k = kernels;

float Bf(float v) { return Bf16ToF32(F32ToBf16(v)); }

// Row quantised as the device quantises it, returned as the values the
// matmul multiplies (code times its block's scale).
std::vector<float> QuantisedRow(const float* v, int64_t cols) {
  std::vector<float> q(cols);
  for (int64_t b = 0; b < k::Fp8Blocks(cols); ++b) {
    const int64_t c0 = b * k::kFp8Block;
    const int64_t c1 = std::min(cols, c0 + k::kFp8Block);
    float amax = 0;
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(v[c]));
    const float s = k::Fp8BlockScale(amax);
    for (int64_t c = c0; c < c1; ++c) {
      q[c] = k::E4M3ToF32(k::E4M3FromF32(v[c] / s)) * s;
    }
  }
  return q;
}

absl::StatusOr<Fp8ExpertImage> Image(const ModelSource& src, bool shared,
                                     int64_t e) {
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w1,
      src.Get(0, shared ? WeightRole::kSharedW1 : WeightRole::kW1, e));
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w3,
      src.Get(0, shared ? WeightRole::kSharedW3 : WeightRole::kW3, e));
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w2,
      src.Get(0, shared ? WeightRole::kSharedW2 : WeightRole::kW2, e));
  return PackFp8Expert(w1, w3, w2);
}

}  // namespace

void Fp8ExpertRows(const Fp8ExpertImage& e, const float* x, int64_t m, float* y,
                   const GpuExpertExtras& extras) {
  const int64_t H = e.hidden, I = e.inter;
  for (int64_t r = 0; r < m; ++r) {
    const std::vector<float> xq = QuantisedRow(x + r * H, H);
    std::vector<float> h(I);
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < H; ++c) {
        g += double(xq[c]) * Fp8W13Value(e, i, c);
        u += double(xq[c]) * Fp8W13Value(e, e.inter_pad + i, c);
      }
      float gb = Bf(static_cast<float>(g));
      float ub = Bf(static_cast<float>(u));
      if (extras.b1 != nullptr) gb = Bf(gb + extras.b1[i]);
      if (extras.b3 != nullptr) ub = Bf(ub + extras.b3[i]);
      h[i] = k::GatedAct(extras.act, gb, ub);
    }
    const std::vector<float> hq = QuantisedRow(h.data(), I);
    for (int64_t j = 0; j < H; ++j) {
      double o = 0;
      for (int64_t i = 0; i < I; ++i) o += double(hq[i]) * Fp8W2Value(e, j, i);
      y[r * H + j] = Bf(static_cast<float>(o));
      if (extras.b2 != nullptr) y[r * H + j] = Bf(y[r * H + j] + extras.b2[j]);
    }
  }
}

namespace {

// What the routed expert `e` (or the shared one, -1) adds to the pass.
GpuExpertExtras ExtrasFor(const GoldenCase& c, int64_t e) {
  GpuExpertExtras x;
  x.act = e >= 0 ? GatedActOf(c.config) : SharedGatedActOf(c.config);
  if (e >= 0 && c.config.expert_bias) {  // shared experts: no biases
    x.b1 = c.b1.data() + e * c.config.inter;
    x.b3 = c.b3.data() + e * c.config.inter;
    x.b2 = c.b2.data() + e * c.config.hidden;
  }
  return x;
}

// One row through expert `expert` (-1: the shared one): bf16 values in,
// the expert's output out.
using ExpertRowFn =
    absl::FunctionRef<absl::Status(int64_t expert, const float* x, float* y)>;

// The layer with the case's own routing (top_idx, top_w): each slot's row
// rounded to bf16 (scaled first under score_before_experts) through `row`,
// weighted and summed in fp32 in slot order; the shared expert likewise.
absl::StatusOr<std::vector<float>> EmulateLayer(const GoldenCase& c,
                                                ExpertRowFn row) {
  const MoeLayerConfig& cfg = c.config;
  const int64_t n = c.tokens, H = cfg.hidden;
  // Each token's (expert, weight) slots, from the case's routing.
  std::vector<std::vector<std::pair<int64_t, float>>> slots(n);
  if (cfg.routing == RoutingMode::kExpertChoice) {
    const int64_t E = c.top_shape[0], C = c.top_shape[1];
    std::vector<double> sum(n, 0.0);
    for (int64_t i = 0; i < E * C; ++i) sum[c.top_idx[i]] += c.top_w[i];
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t j = 0; j < C; ++j) {
        const int64_t t = c.top_idx[e * C + j];
        slots[t].push_back(
            {e, static_cast<float>(c.top_w[e * C + j] / (sum[t] + 1e-9))});
      }
    }
  } else {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t s = 0; s < cfg.top_k; ++s) {
        slots[t].push_back(
            {c.top_idx[t * cfg.top_k + s], c.top_w[t * cfg.top_k + s]});
      }
    }
  }
  std::vector<float> y(n * H, 0.0f), xb(H), o(H);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = c.x.data() + t * H;
    for (const auto& [e, w] : slots[t]) {
      if (w == 0.0f) continue;  // dropped: weight 0, not computed
      if (e >= cfg.num_experts) {
        // A zero expert: the router adds w * x, in fp32 on the host.
        for (int64_t j = 0; j < H; ++j) y[t * H + j] += w * x[j];
        continue;
      }
      const float a = cfg.score_before_experts ? w : 1.0f;
      for (int64_t j = 0; j < H; ++j) xb[j] = Bf(x[j] * a);
      MOE_RETURN_IF_ERROR(row(e, xb.data(), o.data()));
      const float b = cfg.score_before_experts ? 1.0f : w;
      for (int64_t j = 0; j < H; ++j) y[t * H + j] += b * o[j];
    }
  }
  if (cfg.has_shared()) {
    for (int64_t t = 0; t < n; ++t) {
      const float* x = c.x.data() + t * H;
      for (int64_t j = 0; j < H; ++j) xb[j] = Bf(x[j]);
      MOE_RETURN_IF_ERROR(row(-1, xb.data(), o.data()));
      float g = 1.0f;
      if (cfg.shared_gate) {
        double d = 0;
        for (int64_t j = 0; j < H; ++j) d += double(c.sgate[j]) * x[j];
        g = static_cast<float>(1.0 / (1.0 + std::exp(-d)));
      }
      for (int64_t j = 0; j < H; ++j) y[t * H + j] += g * o[j];
    }
  }
  // output_scale, then the output bias: on the host, in fp32.
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < H; ++j) {
      y[t * H + j] *= cfg.output_scale;
      if (cfg.output_bias) y[t * H + j] += c.output_bias[j];
    }
  }
  return y;
}

}  // namespace

absl::StatusOr<std::vector<float>> EmulateCudaFp8Layer(const GoldenCase& c) {
  auto src = MakeGoldenSource(c);
  std::map<int64_t, Fp8ExpertImage> images;  // by expert, -1 shared
  return EmulateLayer(c, [&](int64_t e, const float* x, float* y) {
    auto it = images.find(e);
    if (it == images.end()) {
      MOE_ASSIGN_OR_RETURN(Fp8ExpertImage img, Image(*src, e < 0, e));
      it = images.emplace(e, std::move(img)).first;
    }
    Fp8ExpertRows(it->second, x, 1, y, ExtrasFor(c, e));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<float>> EmulateCudaBf16Layer(const GoldenCase& c) {
  const MoeLayerConfig& cfg = c.config;
  const int64_t H = cfg.hidden;
  return EmulateLayer(c, [&](int64_t e, const float* x, float* y) {
    const int64_t I = e < 0 ? cfg.shared_inter : cfg.inter;
    const float* w1 = e < 0 ? c.sw1.data() : c.w1.data() + e * I * H;
    const float* w3 = e < 0 ? c.sw3.data() : c.w3.data() + e * I * H;
    const float* w2 = e < 0 ? c.sw2.data() : c.w2.data() + e * I * H;
    const GpuExpertExtras extras = ExtrasFor(c, e);
    std::vector<float> h(I);
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t j = 0; j < H; ++j) {
        g += double(x[j]) * Bf(w1[i * H + j]);
        u += double(x[j]) * Bf(w3[i * H + j]);
      }
      float gb = Bf(static_cast<float>(g)), ub = Bf(static_cast<float>(u));
      if (extras.b1 != nullptr) gb = Bf(gb + extras.b1[i]);
      if (extras.b3 != nullptr) ub = Bf(ub + extras.b3[i]);
      h[i] = Bf(k::GatedAct(extras.act, gb, ub));
    }
    for (int64_t j = 0; j < H; ++j) {
      double o = 0;
      for (int64_t i = 0; i < I; ++i) o += double(h[i]) * Bf(w2[j * I + i]);
      // Routed outputs are bf16 rows; the shared expert's are fp32.
      y[j] = e < 0 ? static_cast<float>(o) : Bf(static_cast<float>(o));
      if (extras.b2 != nullptr) y[j] = Bf(y[j] + extras.b2[j]);
    }
    return absl::OkStatus();
  });
}

::testing::AssertionResult CudaBf16Close(const GoldenCase& c,
                                         const std::vector<float>& y) {
  auto emulated = EmulateCudaBf16Layer(c);
  if (!emulated.ok()) {
    return ::testing::AssertionFailure() << emulated.status().ToString();
  }
  if (AllClose(*emulated, c.y, kBf16Tol)) return AllClose(y, c.y, kBf16Tol);
  return RmsClose(y, c.y, kBf16GpuTol);
}

}  // namespace moe::testing

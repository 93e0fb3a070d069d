// The activations of expert MLPs (docs/architecture.md section 3.2),
// written once for the CPU kernels and any device kernel: act(g, u) for the
// gate projection g and the up projection u of one intermediate column. A
// non-gated expert (relu2) has only u; its g is ignored.
// Plain C++ that nvcc compiles for the device too.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace moe::kernels {

enum ActId : int32_t {
  kActSilu = 0,       // silu(g) * u
  kActGptOss = 1,     // (u' + 1) * g' * sigmoid(alpha * g')
  kActSiluClamp = 2,  // silu(g') * u'
  kActRelu2 = 3,      // relu(u)^2, non-gated (Nemotron 3)
  kActGeluTanh = 4,   // gelu_tanh(g) * u (Gemma 4)
  // SiTU (Kimi K3): beta tanh(g / beta) sigmoid(g) * u', with u' =
  // lambda tanh(u / lambda) when lambda > 0, else u.
  kActSitu = 5,
  kActGeluErf = 6,     // gelu(g) * u with the exact erf GELU (Grok-1)
  kActSwigluStep = 7,  // min(silu(g), L) * u' (Step-3.5's SwigluStep)
};

// g' = min(g, L), u' = min(max(u, -L), L): gpt-oss's and DeepSeek-V4's
// clamps. A NaN stays NaN (as torch.clamp keeps it), so a NaN weight still
// makes the output non-finite, which is refused downstream.
MOE_HOST_DEVICE inline float ClampGate(float g, float limit) {
  return g > limit ? limit : g;
}
MOE_HOST_DEVICE inline float ClampUp(float u, float limit) {
  return u < -limit ? -limit : (u > limit ? limit : u);
}

MOE_HOST_DEVICE inline float GatedAct(int32_t act, float g, float u,
                                      float alpha, float limit,
                                      float beta = 1.0f,
                                      float linear_beta = 0.0f) {
  if (act == kActSilu) return g / (1.0f + expf(-g)) * u;
  if (act == kActRelu2) {
    const float r = u > 0.0f ? u : (u != u ? u : 0.0f);  // NaN stays NaN
    return r * r;
  }
  if (act == kActGeluTanh) {
    // 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))), PyTorch's
    // gelu(approximate="tanh").
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner)) * u;
  }
  if (act == kActSitu) {
    // The cap tanh(g / beta) bounds the gate, but sigmoid reads g itself.
    const float gate = beta * tanhf(g / beta) / (1.0f + expf(-g));
    const float up =
        linear_beta > 0.0f ? linear_beta * tanhf(u / linear_beta) : u;
    return gate * up;
  }
  if (act == kActGeluErf) {
    // 0.5 g (1 + erf(g / sqrt(2))), PyTorch's gelu(approximate="none").
    return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f)) * u;
  }
  if (act == kActSwigluStep) {
    // The limit caps silu's output from above, where silu_clamp caps g.
    return ClampGate(g / (1.0f + expf(-g)), limit) * ClampUp(u, limit);
  }
  const float gc = ClampGate(g, limit), uc = ClampUp(u, limit);
  if (act == kActGptOss) {
    const float glu = gc / (1.0f + expf(-alpha * gc));
    return (uc + 1.0f) * glu;
  }
  return gc / (1.0f + expf(-gc)) * uc;
}

// A layer's activation as a device kernel takes it (by value).
struct GatedActParams {
  int32_t act = kActSilu;
  float alpha = 1.702f;
  float limit = 7.0f;
  float beta = 1.0f;         // situ
  float linear_beta = 0.0f;  // situ
};
// (C++17: the CUDA kernels' standard has no defaulted comparisons.)
inline bool operator==(const GatedActParams& a, const GatedActParams& b) {
  return a.act == b.act && a.alpha == b.alpha && a.limit == b.limit &&
         a.beta == b.beta && a.linear_beta == b.linear_beta;
}
inline bool operator!=(const GatedActParams& a, const GatedActParams& b) {
  return !(a == b);
}

MOE_HOST_DEVICE inline float GatedAct(const GatedActParams& p, float g,
                                      float u) {
  return GatedAct(p.act, g, u, p.alpha, p.limit, p.beta, p.linear_beta);
}

}  // namespace moe::kernels

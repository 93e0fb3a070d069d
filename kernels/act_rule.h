// The gated activations of expert MLPs (docs/architecture.md section 3.2),
// written once for the CPU kernels and any device kernel: act(g, u) for the
// gate projection g and the up projection u of one intermediate column.
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
                                      float alpha, float limit) {
  if (act == kActSilu) return g / (1.0f + expf(-g)) * u;
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
};
// (C++17: the CUDA kernels' standard has no defaulted comparisons.)
inline bool operator==(const GatedActParams& a, const GatedActParams& b) {
  return a.act == b.act && a.alpha == b.alpha && a.limit == b.limit;
}
inline bool operator!=(const GatedActParams& a, const GatedActParams& b) {
  return !(a == b);
}

MOE_HOST_DEVICE inline float GatedAct(const GatedActParams& p, float g,
                                      float u) {
  return GatedAct(p.act, g, u, p.alpha, p.limit);
}

}  // namespace moe::kernels

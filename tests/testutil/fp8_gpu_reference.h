// A host emulation of the CUDA backend's block-scaled FP8 layer (sm_90:
// engine/cuda/cuda_experts.cc RunFp8), sharing its rules (kernels/fp8_rule.h)
// and weight form (engine/cuda/fp8_image.h) but none of its code: rows
// rounded to bf16, quantised to E4M3 per row per 128 channels, block-scaled
// products accumulated in double, gate-up values rounded to bf16 (then their
// biases added, rounded again), h = silu(g) * u (or the layer's activation)
// in fp32 quantised the same way, expert outputs rounded to bf16 (then their
// bias added, rounded again), combined in fp32; and of its bf16 layer
// (EmulateCudaBf16Layer). Lets the CPU say what error the GPU path must show
// against the fp32 reference, and the GPU tests compare against it.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/fp8_image.h"
#include "gtest/gtest.h"
#include "kernels/act_rule.h"
#include "tests/testutil/golden_case.h"

namespace moe::testing {

// The 2026 expert options as the GPU applies them (engine/cuda/
// cuda_experts.cc): the layer's activation (kernels/act_rule.h) in place of
// silu(g) * u; biases (each null or [I], [I], [H]) added in fp32 to the
// bf16 gate, up and output values, each sum rounded back to bf16.
struct GpuExpertExtras {
  kernels::GatedActParams act;
  const float* b1 = nullptr;
  const float* b3 = nullptr;
  const float* b2 = nullptr;
};

// One expert over m rows x [m, H] (values already bf16): y [m, H].
void Fp8ExpertRows(const Fp8ExpertImage& e, const float* x, int64_t m, float* y,
                   const GpuExpertExtras& extras = {});

// The layer's y for every token of `c`, with the case's own routing
// (top_idx, top_w) and the CUDA backend's FP8 numerics.
absl::StatusOr<std::vector<float>> EmulateCudaFp8Layer(const GoldenCase& c);

// The same with the CUDA backend's bf16 numerics (engine/cuda/
// cuda_experts.cc's bf16 pass): bf16 rows and weights, products accumulated
// (here in double), gate-up values rounded to bf16, biases added and
// rounded, h rounded to bf16, routed outputs rounded to bf16 (the shared
// expert's down projection writes fp32), combined in fp32.
absl::StatusOr<std::vector<float>> EmulateCudaBf16Layer(const GoldenCase& c);

// Whether `y`, the CUDA backend's bf16 answer to `c`, is the case's answer:
// within the golden bf16 bound per element (kBf16Tol) where the GPU's
// numerics, emulated, meet it; within kBf16GpuTol where they cannot (the
// rounding of activations alone exceeds it per element).
::testing::AssertionResult CudaBf16Close(const GoldenCase& c,
                                         const std::vector<float>& y);

}  // namespace moe::testing

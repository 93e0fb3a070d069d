// A host emulation of the CUDA backend's block-scaled FP8 layer (sm_90:
// engine/cuda/cuda_experts.cc RunFp8), sharing its rules
// (kernels/fp8_rule.h) and weight form (engine/cuda/fp8_image.h) but none
// of its code: rows rounded to bf16, quantised to E4M3 per row per 128
// channels, block-scaled products accumulated in double, gate-up values
// rounded to bf16, h = silu(g) * u in fp32 quantised the same way, expert
// outputs rounded to bf16, combined in fp32. Lets the CPU say what error the
// GPU path must show against the fp32 reference, and the GPU tests compare
// against it.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/fp8_image.h"
#include "tests/testutil/golden_case.h"

namespace moe::testing {

// One expert over m rows x [m, H] (values already bf16): y [m, H].
void Fp8ExpertRows(const Fp8ExpertImage& e, const float* x, int64_t m,
                   float* y);

// The layer's y for every token of `c`, with the case's own routing
// (top_idx, top_w) and the CUDA backend's FP8 numerics.
absl::StatusOr<std::vector<float>> EmulateCudaFp8Layer(const GoldenCase& c);

}  // namespace moe::testing

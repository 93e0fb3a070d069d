// FP8 test models: DeepSeek-V3-style block quantisation done independently
// of the engine's loader, and a checkpoint written with it (F8_E4M3 experts,
// weight_scale_inv blocks with partial edges, quantization_config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/testutil/golden_case.h"

namespace moe::testing {

// Quantises a [rows, cols] matrix in 128 x 128 blocks: scale = block amax /
// 448 (1 for an all-zero block), codes = e4m3 of w / scale rounded to
// nearest even. Scales are [ceil(rows / 128), ceil(cols / 128)].
void QuantiseFp8Blocks(const float* w, int64_t rows, int64_t cols,
                       std::vector<uint8_t>* codes, std::vector<float>* scales);

// Replaces every expert weight of `c` (routed and shared) by its FP8 round
// trip, and recomputes the reference output and routing on those weights:
// the dequantised reference an FP8 engine must match at fp32 tolerance.
void RoundTripExpertsThroughFp8(GoldenCase* c);

// Writes `c` (its experts already FP8 round-tripped, as by
// RoundTripExpertsThroughFp8) as a DeepSeek-V3 checkpoint in `dir`, MoE
// layer `layer`, whose expert weights are F8_E4M3 with weight_scale_inv and
// whose config.json has an fp8 quantization_config.
absl::Status WriteFp8Checkpoint(const GoldenCase& c, int64_t layer,
                                const std::string& dir);

}  // namespace moe::testing

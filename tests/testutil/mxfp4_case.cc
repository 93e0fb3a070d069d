#include "tests/testutil/mxfp4_case.h"

#include <algorithm>
#include <cstdint>

#include "kernels/mxfp4_rule.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {
namespace {

// Rows of `cols` values, each quantised in blocks of 32 and decoded back.
void RoundTripRows(float* w, int64_t rows, int64_t cols) {
  uint8_t codes[kernels::kMxBlock];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c0 = 0; c0 < cols; c0 += kernels::kMxBlock) {
      float* v = w + i * cols + c0;
      const int64_t n = std::min<int64_t>(kernels::kMxBlock, cols - c0);
      const float scale =
          kernels::E8M0ToF32(kernels::Mxfp4QuantizeBlock(v, n, codes));
      for (int64_t j = 0; j < n; ++j) {
        v[j] = kernels::E2M1ToF32(codes[j]) * scale;
      }
    }
  }
}

}  // namespace

void RoundTripRoutedExpertsThroughMxfp4(GoldenCase* c) {
  const int64_t H = c->config.hidden, I = c->config.inter;
  for (int64_t e = 0; e < c->config.num_experts; ++e) {
    RoundTripRows(c->w1.data() + e * I * H, I, H);
    RoundTripRows(c->w3.data() + e * I * H, I, H);
    RoundTripRows(c->w2.data() + e * H * I, H, I);
  }
  RunReferenceMoe(*c);
}

}  // namespace moe::testing

// The vectorisable exp and SiLU of the SwiGLU epilogue against libm.
#include "kernels/cpu/tile_store.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace moe::kernels::cpu::internal {
namespace {

TEST(FastExp, WithinThreeUlpOfLibmOverTheNormalRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(FastExp(x) - want) / want;
    worst = std::max(worst, rel);
  }
  // 3 ulp of fp32 at 1 is 3 * 2^-23.
  EXPECT_LT(worst, 3.0 * std::ldexp(1.0, -23)) << worst;
  EXPECT_EQ(FastExp(0.0f), 1.0f);
}

TEST(FastExp, TailsSaturateToFiniteValues) {
  for (float x : {-1e4f, -200.0f, -88.0f}) {
    EXPECT_GT(FastExp(x), 0.0f);
    EXPECT_LT(FastExp(x), 1e-37f);
  }
  for (float x : {89.0f, 200.0f, 1e4f}) {
    EXPECT_TRUE(std::isfinite(FastExp(x)));
    EXPECT_GT(FastExp(x), 1e38f);
  }
}

TEST(SiluMulRow, MatchesTheDefinition) {
  float g[7] = {-100.0f, -10.0f, -1.0f, 0.0f, 0.5f, 10.0f, 100.0f};
  float u[7] = {1.0f, 2.0f, -3.0f, 4.0f, 5.0f, -6.0f, 0.25f};
  float out[7];
  SiluMulRow(g, u, out, 7);
  for (int i = 0; i < 7; ++i) {
    const double want =
        g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::abs(want))) << g[i];
  }
}

}  // namespace
}  // namespace moe::kernels::cpu::internal

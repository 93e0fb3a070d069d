// One-row MXFP4 GEMMs (decode) on every ISA the CPU has. On AVX2 they take
// the integer GEMV (kernels/cpu/mxfp4_gemv_avx2.cc), which rounds each
// activation to 22 bits below its 32-block's largest magnitude: held here
// to that bound, against a double-precision product, over activations that
// span 60 binades inside one block, zero and non-finite blocks, short last
// blocks, panel ranges and the SwiGLU epilogue.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/mxfp4_rule.h"
#include "tests/kernels/cpu/isa_param_test.h"

namespace moe::kernels::cpu {
namespace {

using Mxfp4GemvTest = IsaParamTest;

// An [n, k] MXFP4 weight with random codes and scales near 127, packed, and
// its dequantised values.
struct Weight {
  int64_t n, k;
  std::vector<uint8_t> pairs, scales, packed;
  std::vector<double> deq;  // [n][k]
  Weight(int64_t n_, int64_t k_, uint64_t seed) : n(n_), k(k_) {
    std::mt19937_64 rng(seed);
    const int64_t pair_len = (k + 1) / 2, blocks = MxBlocks(k);
    pairs.resize(n * pair_len);
    scales.resize(n * blocks);
    for (uint8_t& b : pairs) b = static_cast<uint8_t>(rng());
    for (uint8_t& s : scales) s = static_cast<uint8_t>(116 + rng() % 20);
    std::vector<const uint8_t*> rows(n), row_scales(n);
    deq.resize(n * k);
    for (int64_t j = 0; j < n; ++j) {
      rows[j] = pairs.data() + j * pair_len;
      row_scales[j] = scales.data() + j * blocks;
      for (int64_t kk = 0; kk < k; ++kk) {
        deq[j * k + kk] = Mxfp4Value(rows[j], row_scales[j], kk);
      }
    }
    packed.resize(PackedBytes(WeightFormat::kMXFP4, n, k));
    PackRowsMXFP4(rows.data(), row_scales.data(), n, k, k, packed.data());
  }
  std::vector<float> Gemv(const std::vector<float>& a, int64_t p0, int64_t p1,
                          Epilogue epilogue = Epilogue::kStore) const {
    std::vector<float> out(n, -7.0f);
    const float* row = a.data();
    float* out_row = out.data();
    GemmPanels(&row, 1, k, packed.data(), WeightFormat::kMXFP4, p0, p1,
               epilogue, n, &out_row);
    return out;
  }
};

// Activations of wildly different magnitudes inside each block, a few exact
// zeros, all scaled by 2^shift.
std::vector<float> WideRange(int64_t k, uint64_t seed, int shift) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::vector<float> a(k);
  for (int64_t i = 0; i < k; ++i) {
    const int e = static_cast<int>(rng() % 61) - 30;
    a[i] = (rng() % 9 == 0) ? 0.0f
                            : std::ldexp(mant(rng), e) * (rng() & 1 ? 1 : -1);
    a[i] = std::ldexp(a[i], shift);
  }
  return a;
}

TEST_P(Mxfp4GemvTest, WithinTwentyTwoBitsOfEachBlocksLargestActivation) {
  // shift -140: block maxima near 2^-110 (below 2^-100 the quantiser
  // rounds to multiples of 2^-123), the rest down to fp32's denormals.
  for (int64_t k : {5, 32, 64, 200, 2048}) {
    for (int shift : {0, -140}) {
      const Weight w(70, k, 11 + k);
      const std::vector<float> a = WideRange(k, k, shift);
      const std::vector<float> got = w.Gemv(a, 0, NumPanels(w.n));
      for (int64_t j = 0; j < w.n; ++j) {
        double exact = 0, rounding = 0, quantised = 0;
        int blocks = 0;
        for (int64_t b = 0; b * kMxBlock < k; ++b) {
          double amax = 0, wsum = 0;
          for (int64_t kk = b * kMxBlock; kk < std::min(k, (b + 1) * kMxBlock);
               ++kk) {
            const double wv = w.deq[j * k + kk];
            exact += wv * a[kk];
            rounding += std::fabs(wv * a[kk]);
            amax = std::max(amax, std::fabs(double(a[kk])));
            wsum += std::fabs(wv);
          }
          int e = 0;
          std::frexp(amax, &e);  // amax < 2^e; e >= -100 in the kernel
          quantised += wsum * std::ldexp(1.0, std::max(e, -100) - 23);
          ++blocks;
        }
        // The activations' rounding, plus fp32 rounding of the block sums and
        // of their sum (a few ulps of the magnitudes involved), plus fp32's
        // smallest denormal for the blocks scaled below 2^-126.
        const double bound = quantised + std::ldexp(rounding, -20) + 1e-44;
        ASSERT_LE(std::fabs(got[j] - exact), bound)
            << "k=" << k << " shift " << shift << " column " << j << " got "
            << got[j] << " exact " << exact;
      }
    }
  }
}

TEST_P(Mxfp4GemvTest, ZeroRowsGiveZeroAndNonFiniteGivesNaN) {
  const Weight w(40, 96, 5);
  std::vector<float> a(96, 0.0f);
  for (float v : w.Gemv(a, 0, 2)) EXPECT_EQ(v, 0.0f);
  a[3] = 1.0f;
  a[40] = std::numeric_limits<float>::quiet_NaN();
  for (float v : w.Gemv(a, 0, 2)) EXPECT_TRUE(std::isnan(v));
  a[40] = std::numeric_limits<float>::infinity();
  for (float v : w.Gemv(a, 0, 2)) EXPECT_FALSE(std::isfinite(v));
  // A finite row after a NaN one: nothing of it is left behind.
  a[40] = 0.5f;
  const std::vector<float> got = w.Gemv(a, 0, 2);
  for (int64_t j = 0; j < w.n; ++j) {
    const double want = w.deq[j * 96 + 3] + 0.5 * w.deq[j * 96 + 40];
    EXPECT_NEAR(got[j], want, 1e-6 * (std::fabs(want) + 1e-30)) << j;
  }
}

TEST_P(Mxfp4GemvTest, PanelRangesAndTheSwigluEpilogue) {
  const Weight w(160, 300, 9);  // 5 panels
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> a(300);
  for (float& v : a) v = u(rng);
  const std::vector<float> all = w.Gemv(a, 0, 5);
  const std::vector<float> part = w.Gemv(a, 1, 3);
  for (int64_t j = 0; j < w.n; ++j) {
    if (j >= 32 && j < 96) {
      EXPECT_EQ(part[j], all[j]) << j;  // the same bits, panel by panel
    } else {
      EXPECT_EQ(part[j], -7.0f) << j;  // untouched
    }
  }
  // Fused gate/up panels: panel p's first 16 columns are gates, the next
  // 16 ups; out[16p + c] = silu(g) * u.
  const std::vector<float> act = w.Gemv(a, 0, 5, Epilogue::kSwiGLU);
  for (int64_t p = 0; p < 5; ++p) {
    for (int64_t c = 0; c < 16; ++c) {
      const double g = all[32 * p + c], up = all[32 * p + 16 + c];
      const double want = g / (1 + std::exp(-g)) * up;
      EXPECT_NEAR(act[16 * p + c], want, 1e-5 * (std::fabs(want) + 1e-6))
          << p << " " << c;
    }
  }
}

MOE_INSTANTIATE_ISA_TESTS(Mxfp4GemvTest);

}  // namespace
}  // namespace moe::kernels::cpu

// The packed GEMM on NVFP4 panels, on every ISA the CPU has, against a
// straightforward reference: the weights dequantised to fp32 by the rule
// (kernels/nvfp4_rule.h) and multiplied in double precision. Odd K (not a
// multiple of 16 or 32, and padded K as for W2), odd N, and row counts for
// each of the kernels' paths (decode-sized tiles, one register tile, the
// block decoded once for several tiles).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/nvfp4_rule.h"
#include "tests/kernels/cpu/isa_param_test.h"

namespace moe::kernels::cpu {
namespace {

using Nvfp4GemmTest = IsaParamTest;

// A random NVFP4 weight [n, row_len]: code pairs, E4M3 scales (positive,
// normal, well inside the range), one global scale per row (each row its
// own tensor, as the rows of a fused gate/up panel come from two).
struct RandomNvfp4 {
  int64_t n, row_len, pair_len, blocks;
  std::vector<uint8_t> pairs, scales;
  std::vector<float> globals;
  std::vector<const uint8_t*> rows, row_scales;

  RandomNvfp4(int64_t n_, int64_t row_len_, std::mt19937_64& rng)
      : n(n_), row_len(row_len_) {
    pair_len = (row_len + 1) / 2;
    blocks = NvBlocks(row_len);
    pairs.resize(n * pair_len);
    scales.resize(n * blocks);
    globals.resize(n);
    for (uint8_t& b : pairs) b = static_cast<uint8_t>(rng());
    // Exponent fields 4..11 (2^-3 .. 2^4), any mantissa.
    for (uint8_t& b : scales) b = static_cast<uint8_t>(0x20 + rng() % 0x40);
    std::uniform_real_distribution<float> g(1e-3f, 2e-2f);
    for (float& x : globals) x = g(rng);
    rows.resize(n);
    row_scales.resize(n);
    for (int64_t j = 0; j < n; ++j) {
      rows[j] = pairs.data() + j * pair_len;
      row_scales[j] = scales.data() + j * blocks;
    }
  }
  float Value(int64_t j, int64_t kk) const {
    return Nvfp4Value(rows[j], row_scales[j], globals[j], kk);
  }
};

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST_P(Nvfp4GemmTest, MatchesDequantisedReference) {
  std::mt19937_64 rng(29);
  for (int64_t m : {1, 2, 3, 4, 6, 7, 8, 13, 25}) {
    for (int64_t n : {1, 33, 70}) {
      for (int64_t k : {1, 7, 16, 33, 50, 96, 300, 544}) {
        const int64_t row_len = k == 300 ? 290 : k;  // padded K, as for W2
        RandomNvfp4 w(n, row_len, rng);
        std::vector<uint8_t> packed(PackedBytes(WeightFormat::kNVFP4, n, k));
        PackRowsNVFP4(w.rows.data(), w.row_scales.data(), w.globals.data(), n,
                      k, row_len, packed.data());
        auto a = Random(m * k, m * 1000 + k);
        std::vector<float> c(m * n, -9.0f);
        std::vector<const float*> a_rows(m);
        std::vector<float*> c_rows(m);
        for (int64_t i = 0; i < m; ++i) {
          a_rows[i] = a.data() + i * k;
          c_rows[i] = c.data() + i * n;
        }
        GemmPanels(a_rows.data(), m, k, packed.data(), WeightFormat::kNVFP4, 0,
                   NumPanels(n), Epilogue::kStore, n, c_rows.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0, mag = 0;
            for (int64_t kk = 0; kk < row_len; ++kk) {
              const double p = double(a[i * k + kk]) * w.Value(j, kk);
              want += p;
              mag += std::fabs(p);
            }
            // fp32 accumulation: a few ulps of the sum of magnitudes.
            ASSERT_NEAR(c[i * n + j], want, 2e-6 * mag + 1e-30)
                << "m=" << m << " n=" << n << " k=" << k << " i=" << i
                << " j=" << j;
          }
        }
      }
    }
  }
}

// One row (decode; on AVX2 the integer GEMV, which rounds each activation
// to 22 bits below its 32-block's largest magnitude) over activations that
// span 60 binades inside a block, whole zero blocks, short last blocks of at
// most and of more than 16 steps, and a range of panels: within that
// rounding of a double-precision product.
TEST_P(Nvfp4GemmTest, OneRowWithinTheActivationRounding) {
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> binade(-30, 30);
  for (int64_t k : {7, 16, 20, 50, 64, 300}) {
    const int64_t n = 70;
    RandomNvfp4 w(n, k, rng);
    std::vector<uint8_t> packed(PackedBytes(WeightFormat::kNVFP4, n, k));
    PackRowsNVFP4(w.rows.data(), w.row_scales.data(), w.globals.data(), n, k, k,
                  packed.data());
    std::vector<float> a(k);
    for (int64_t kk = 0; kk < k; ++kk) {
      a[kk] = std::ldexp(u(rng), binade(rng));
      if (kk / 32 == 1) a[kk] = 0.0f;  // a whole zero block
    }
    std::vector<float> c(n, -9.0f);
    const float* a_row = a.data();
    std::vector<float*> c_rows = {c.data()};
    // Panels 1 and 2 only: panel 0's outputs must stay untouched.
    GemmPanels(&a_row, 1, k, packed.data(), WeightFormat::kNVFP4, 1, 3,
               Epilogue::kStore, n, c_rows.data());
    for (int64_t j = 0; j < n; ++j) {
      if (j < kPanelWidth) {
        ASSERT_EQ(c[j], -9.0f) << "k=" << k << " column " << j;
        continue;
      }
      double want = 0, bound = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double wv = w.Value(j, kk);
        want += double(a[kk]) * wv;
        float bmax = 0.0f;
        for (int64_t i = kk / 32 * 32;
             i < std::min<int64_t>(k, kk / 32 * 32 + 32); ++i) {
          bmax = std::max(bmax, std::fabs(a[i]));
        }
        bound += std::fabs(wv) * (bmax * 0x1p-21 + 4e-7 * std::fabs(a[kk]));
      }
      ASSERT_NEAR(c[j], want, bound + 1e-30) << "k=" << k << " column " << j;
    }
  }
}

// Every E2M1 code at every non-NaN E4M3 scale through the kernels'
// widening: a column of ones against 16 one-element rows, row j holding
// code j, gives code value x scale x global exactly (global a power of two).
TEST_P(Nvfp4GemmTest, ConversionIsExactForEveryCodeAndScale) {
  for (int64_t m : {1, 2, 5, 13}) {
    std::vector<float> ones(m, 1.0f), c(m * 16);
    std::vector<const float*> a(m);
    std::vector<float*> c_rows(m);
    for (int64_t i = 0; i < m; ++i) {
      a[i] = &ones[i];
      c_rows[i] = c.data() + i * 16;
    }
    for (int s = 0; s < 256; ++s) {
      const uint8_t scale = static_cast<uint8_t>(s);
      if (IsE4M3NaN(scale)) continue;
      std::vector<uint8_t> codes(16);
      std::vector<const uint8_t*> rows(16), row_scales(16, &scale);
      std::vector<float> globals(16, 0.25f);
      for (int j = 0; j < 16; ++j) {
        codes[j] = static_cast<uint8_t>(j | 0xf0);  // high nibble: element 1
        rows[j] = &codes[j];
      }
      std::vector<uint8_t> packed(PackedBytes(WeightFormat::kNVFP4, 16, 1));
      PackRowsNVFP4(rows.data(), row_scales.data(), globals.data(), 16, 1, 1,
                    packed.data());
      std::fill(c.begin(), c.end(), -9.0f);
      GemmPanels(a.data(), m, 1, packed.data(), WeightFormat::kNVFP4, 0, 1,
                 Epilogue::kStore, 16, c_rows.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int j = 0; j < 16; ++j) {
          const float want =
              E2M1ToF32(static_cast<uint8_t>(j)) * E4M3ToF32(scale) * 0.25f;
          ASSERT_EQ(c[i * 16 + j], want)
              << "code " << j << " scale " << s << " m=" << m;
        }
      }
    }
  }
}

// A fused gate/up weight whose gate and up tensors have different global
// scales: each panel's 16 gate and 16 up columns are scaled by their own.
TEST_P(Nvfp4GemmTest, FusedSwigluUsesEachColumnsGlobalScale) {
  std::mt19937_64 rng(31);
  const int64_t hidden = 45, inter = 21;  // inter pads to 32
  RandomNvfp4 w1(inter, hidden, rng), w3(inter, hidden, rng);
  for (float& g : w1.globals) g = 0.01f;
  for (float& g : w3.globals) g = 0.003f;
  const int64_t ip = PaddedInter(inter);
  std::vector<int64_t> order(2 * ip);
  FusedGateUpRowOrder(inter, order.data());
  std::vector<const uint8_t*> rows(2 * ip), row_scales(2 * ip);
  std::vector<float> globals(2 * ip, 0.0f);
  for (int64_t i = 0; i < 2 * ip; ++i) {
    const int64_t o = order[i];
    if (o == INT64_MIN) continue;
    const RandomNvfp4& src = o >= 0 ? w1 : w3;
    const int64_t r = o >= 0 ? o : -1 - o;
    rows[i] = src.rows[r];
    row_scales[i] = src.row_scales[r];
    globals[i] = src.globals[r];
  }
  std::vector<uint8_t> packed(
      PackedBytes(WeightFormat::kNVFP4, 2 * ip, hidden));
  PackRowsNVFP4(rows.data(), row_scales.data(), globals.data(), 2 * ip, hidden,
                hidden, packed.data());
  for (int64_t m : {1, 2, 3, 9, 14}) {
    auto x = Random(m * hidden, m);
    std::vector<float> h(m * ip, -9.0f);
    std::vector<const float*> a(m);
    std::vector<float*> out(m);
    for (int64_t i = 0; i < m; ++i) {
      a[i] = x.data() + i * hidden;
      out[i] = h.data() + i * ip;
    }
    GemmPanels(a.data(), m, hidden, packed.data(), WeightFormat::kNVFP4, 0,
               NumPanels(2 * ip), Epilogue::kSwiGLU, 2 * ip, out.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < ip; ++j) {
        double g = 0, u = 0;
        for (int64_t kk = 0; j < inter && kk < hidden; ++kk) {
          g += double(x[i * hidden + kk]) * w1.Value(j, kk);
          u += double(x[i * hidden + kk]) * w3.Value(j, kk);
        }
        const double want = g / (1 + std::exp(-g)) * u;
        ASSERT_NEAR(h[i * ip + j], want, 1e-5 * (1 + std::fabs(want)))
            << "m=" << m << " row " << i << " col " << j;
      }
    }
  }
}

MOE_INSTANTIATE_ISA_TESTS(Nvfp4GemmTest);

// 4.5 bits a weight (plus the column scales): about 0.28x of bf16.
TEST(Nvfp4Gemm, PanelsTakeAboutAQuarterOfBf16) {
  const int64_t n = 2 * 768, k = 2048;
  const double ratio = double(PackedBytes(WeightFormat::kNVFP4, n, k)) /
                       double(PackedBytes(WeightFormat::kBF16, n, k));
  EXPECT_NEAR(ratio, 0.28125, 0.001);
}

}  // namespace
}  // namespace moe::kernels::cpu

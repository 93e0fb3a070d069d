// Packed GEMM on every ISA the CPU has, both weight formats and epilogues,
// against a naive double-precision product, over awkward sizes.
#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/grouped_swiglu.h"
#include "tests/kernels/cpu/isa_param_test.h"

namespace moe::kernels::cpu {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

using IsaTest = IsaParamTest;

TEST_P(IsaTest, StoreMatchesNaive) {
  // 2 and 8: AVX2's two-row panel tile alone and after a 6-row tile.
  for (int64_t m : {1, 2, 5, 6, 8, 12, 13, 31}) {
    for (int64_t n : {1, 31, 32, 33, 70}) {
      // 64 and 300: whole 16-step blocks of A's vector packing, and a tail.
      for (int64_t k : {1, 7, 64, 300}) {
        for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16}) {
          auto a = Random(m * k, m * 100 + k);
          auto w = Random(n * k, n * 7 + k);
          if (f == WeightFormat::kBF16) {
            for (float& x : w) x = Bf16ToF32(F32ToBf16(x));  // exact in bf16
          }
          std::vector<const float*> rows(n), a_rows(m);
          for (int64_t j = 0; j < n; ++j) rows[j] = w.data() + j * k;
          std::vector<float> packed_f(PackedElements(n, k));
          std::vector<uint16_t> packed_b(PackedElements(n, k));
          if (f == WeightFormat::kF32) {
            PackRowsF32(rows.data(), n, k, k, packed_f.data());
          } else {
            std::vector<uint16_t> wb(w.size());
            for (size_t i = 0; i < w.size(); ++i) wb[i] = F32ToBf16(w[i]);
            std::vector<const uint16_t*> brows(n);
            for (int64_t j = 0; j < n; ++j) brows[j] = wb.data() + j * k;
            PackRowsBF16(brows.data(), n, k, k, packed_b.data());
          }
          std::vector<float> c(m * n, -9.0f);
          std::vector<float*> c_rows(m);
          for (int64_t i = 0; i < m; ++i) {
            a_rows[i] = a.data() + i * k;
            c_rows[i] = c.data() + i * n;
          }
          const void* packed = f == WeightFormat::kF32
                                   ? static_cast<const void*>(packed_f.data())
                                   : packed_b.data();
          GemmPanels(a_rows.data(), m, k, packed, f, 0, NumPanels(n),
                     Epilogue::kStore, n, c_rows.data());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double want = 0;
              for (int64_t kk = 0; kk < k; ++kk)
                want += double(a[i * k + kk]) * w[j * k + kk];
              ASSERT_NEAR(c[i * n + j], want, 1e-4 * (1 + std::fabs(want)))
                  << "m=" << m << " n=" << n << " k=" << k << " i=" << i
                  << " j=" << j;
            }
          }
        }
      }
    }
  }
}

TEST_P(IsaTest, FusedSwigluMatchesNaive) {
  const int64_t m = 14, hidden = 29, inter = 21;  // inter pads to 32
  auto x = Random(m * hidden, 1);
  auto w1 = Random(inter * hidden, 2), w3 = Random(inter * hidden, 3);
  const int64_t ip = PaddedInter(inter);
  std::vector<int64_t> order(2 * ip);
  FusedGateUpRowOrder(inter, order.data());
  std::vector<const float*> rows(2 * ip);
  for (int64_t i = 0; i < 2 * ip; ++i) {
    const int64_t o = order[i];
    rows[i] = o == INT64_MIN ? nullptr
              : o >= 0       ? w1.data() + o * hidden
                             : w3.data() + (-1 - o) * hidden;
  }
  std::vector<float> packed(PackedElements(2 * ip, hidden));
  PackRowsF32(rows.data(), 2 * ip, hidden, hidden, packed.data());
  std::vector<float> h(m * ip, -9.0f);
  std::vector<const float*> a(m);
  std::vector<float*> out(m);
  for (int64_t i = 0; i < m; ++i) {
    a[i] = x.data() + i * hidden;
    out[i] = h.data() + i * ip;
  }
  GemmPanels(a.data(), m, hidden, packed.data(), WeightFormat::kF32, 0,
             NumPanels(2 * ip), Epilogue::kSwiGLU, 2 * ip, out.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ip; ++j) {
      double g = 0, u = 0;
      for (int64_t kk = 0; j < inter && kk < hidden; ++kk) {
        g += double(x[i * hidden + kk]) * w1[j * hidden + kk];
        u += double(x[i * hidden + kk]) * w3[j * hidden + kk];
      }
      const double want = g / (1 + std::exp(-g)) * u;
      ASSERT_NEAR(h[i * ip + j], want, 1e-4) << i << "," << j;
    }
  }
}

// Every e4m3 code through the micro-kernel's in-register conversion: a 1 x 1
// A of 1.0 against 256 one-element rows, row j holding code j, gives each
// code's value times its row's scale exactly (NaN codes stay NaN).
TEST_P(IsaTest, Fp8ConversionIsExactForEveryCode) {
  for (float scale : {1.0f, 0.125f, 3.0f}) {
    std::vector<uint8_t> codes(256);
    std::vector<const uint8_t*> rows(256);
    std::vector<const float*> row_scales(256, &scale);
    for (int j = 0; j < 256; ++j) {
      codes[j] = static_cast<uint8_t>(j);
      rows[j] = &codes[j];
    }
    std::vector<uint8_t> packed(PackedBytes(WeightFormat::kFP8, 256, 1));
    PackRowsFP8(rows.data(), row_scales.data(), 256, 1, 1, packed.data());
    const float one = 1.0f;
    const float* a = &one;
    std::vector<float> c(256, -9.0f);
    float* c_row = c.data();
    GemmPanels(&a, 1, 1, packed.data(), WeightFormat::kFP8, 0, NumPanels(256),
               Epilogue::kStore, 256, &c_row);
    for (int j = 0; j < 256; ++j) {
      const float want = F8E4M3ToF32(static_cast<uint8_t>(j)) * scale;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(c[j])) << "code " << j;
      } else {
        EXPECT_EQ(c[j], want) << "code " << j << " scale " << scale;
      }
    }
  }
}

// FP8 weights with block scales (edge blocks smaller) give exactly what the
// fp32 kernel gives on the dequantised weights (the same fp32 weight values,
// the same accumulation order), except the decode-sized tiles (AVX-512: <= 3
// rows, AVX2: <= 2; checked so up to 3 rows on every ISA), which scale each
// block's sum: those within fp32 rounding of it. Each output row gets its
// own scales (checkpoints share one per 128 x 128 block, a special case), so
// that a scale applied to the wrong column shows.
TEST_P(IsaTest, Fp8EqualsF32OnDequantisedWeights) {
  std::mt19937_64 rng(11);
  for (int64_t m : {1, 2, 6, 13}) {
    for (int64_t n : {33, 150}) {
      for (int64_t k : {7, 130, 300}) {
        const int64_t row_len = k == 300 ? 290 : k;  // padded K, as for W2
        const int64_t kb = (row_len + 127) / 128;
        std::vector<float> block(n * kb);
        for (float& b : block) {
          b = std::ldexp(1.0f + (rng() % 100) / 100.0f,
                         -8 + static_cast<int>(rng() % 6));
        }
        std::vector<uint8_t> codes(n * row_len);
        std::vector<float> deq(n * k, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t kk = 0; kk < row_len; ++kk) {
            uint8_t q;
            do {
              q = static_cast<uint8_t>(rng());
            } while ((q & 0x7f) == 0x7f);
            codes[j * row_len + kk] = q;
            deq[j * k + kk] = F8E4M3ToF32(q) * block[j * kb + kk / 128];
          }
        }
        std::vector<const uint8_t*> rows(n);
        std::vector<const float*> row_scales(n), frows(n);
        for (int64_t j = 0; j < n; ++j) {
          rows[j] = codes.data() + j * row_len;
          row_scales[j] = block.data() + j * kb;
          frows[j] = deq.data() + j * k;
        }
        std::vector<uint8_t> p8(PackedBytes(WeightFormat::kFP8, n, k));
        PackRowsFP8(rows.data(), row_scales.data(), n, k, row_len, p8.data());
        std::vector<float> p32(PackedElements(n, k));
        PackRowsF32(frows.data(), n, k, k, p32.data());
        auto a = Random(m * k, m + k);
        std::vector<float> c8(m * n, -9.0f), c32(m * n, -7.0f);
        std::vector<const float*> a_rows(m);
        std::vector<float*> r8(m), r32(m);
        for (int64_t i = 0; i < m; ++i) {
          a_rows[i] = a.data() + i * k;
          r8[i] = c8.data() + i * n;
          r32[i] = c32.data() + i * n;
        }
        GemmPanels(a_rows.data(), m, k, p8.data(), WeightFormat::kFP8, 0,
                   NumPanels(n), Epilogue::kStore, n, r8.data());
        GemmPanels(a_rows.data(), m, k, p32.data(), WeightFormat::kF32, 0,
                   NumPanels(n), Epilogue::kStore, n, r32.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float got = c8[i * n + j], want = c32[i * n + j];
            if (m > 3) {
              ASSERT_EQ(got, want) << "m=" << m << " n=" << n << " k=" << k;
              continue;
            }
            double mag = 0;  // the rounding scale of the dot product
            for (int64_t kk = 0; kk < k; ++kk) {
              mag += std::fabs(double(a[i * k + kk]) * deq[j * k + kk]);
            }
            ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30)
                << "m=" << m << " n=" << n << " k=" << k;
          }
        }
      }
    }
  }
}

// Every E2M1 code at every E8M0 scale through the micro-kernels' widening:
// a column of ones against 16 one-element rows, row j holding code j, gives
// each code's value times 2^(s - 127) exactly. Row counts for each of the
// kernels' paths: the decode-sized tile, the single register tile, and the
// block decoded once for several tiles.
TEST_P(IsaTest, Mxfp4ConversionIsExactForEveryCodeAndScale) {
  for (int64_t m : {1, 5, 13}) {
    std::vector<float> ones(m, 1.0f), c(m * 16);
    std::vector<const float*> a(m);
    std::vector<float*> c_rows(m);
    for (int64_t i = 0; i < m; ++i) {
      a[i] = &ones[i];
      c_rows[i] = c.data() + i * 16;
    }
    for (int s = 0; s < 255; ++s) {
      const uint8_t scale = static_cast<uint8_t>(s);
      std::vector<uint8_t> codes(16);
      std::vector<const uint8_t*> rows(16), row_scales(16, &scale);
      for (int j = 0; j < 16; ++j) {
        codes[j] = static_cast<uint8_t>(j | 0xf0);  // high nibble: element 1
        rows[j] = &codes[j];
      }
      std::vector<uint8_t> packed(PackedBytes(WeightFormat::kMXFP4, 16, 1));
      PackRowsMXFP4(rows.data(), row_scales.data(), 16, 1, 1, packed.data());
      std::fill(c.begin(), c.end(), -9.0f);
      GemmPanels(a.data(), m, 1, packed.data(), WeightFormat::kMXFP4, 0, 1,
                 Epilogue::kStore, 16, c_rows.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int j = 0; j < 16; ++j) {
          const float want =
              E2M1ToF32(static_cast<uint8_t>(j)) * std::ldexp(1.0f, s - 127);
          ASSERT_EQ(c[i * 16 + j], want)
              << "code " << j << " scale " << s << " m=" << m;
        }
      }
    }
  }
}

// MXFP4 weights with E8M0 scales per 32 K values (short last blocks, padded
// K as for W2) give what the fp32 kernel gives on the dequantised weights:
// the same bits where the kernels multiply each code by its scale (exact),
// within fp32 rounding where AVX-512's decode-sized tiles (<= 3 rows) scale
// each block's sum instead.
TEST_P(IsaTest, Mxfp4EqualsF32OnDequantisedWeights) {
  std::mt19937_64 rng(13);
  for (int64_t m : {1, 2, 3, 4, 6, 7, 13, 25}) {
    for (int64_t n : {33, 150}) {
      for (int64_t k : {7, 32, 96, 300, 544}) {
        const int64_t row_len = k == 300 ? 290 : k;  // padded K, as for W2
        const int64_t blocks = MxBlocks(row_len);
        std::vector<uint8_t> pairs(n * (row_len + 1) / 2 + n),
            scales(n * blocks);
        const int64_t pair_len = (row_len + 1) / 2;
        for (uint8_t& b : pairs) b = static_cast<uint8_t>(rng());
        for (uint8_t& b : scales) b = static_cast<uint8_t>(118 + rng() % 16);
        std::vector<float> deq(n * k, 0.0f);
        std::vector<const uint8_t*> rows(n), row_scales(n);
        std::vector<const float*> frows(n);
        for (int64_t j = 0; j < n; ++j) {
          rows[j] = pairs.data() + j * pair_len;
          row_scales[j] = scales.data() + j * blocks;
          frows[j] = deq.data() + j * k;
          for (int64_t kk = 0; kk < row_len; ++kk) {
            deq[j * k + kk] = Mxfp4Value(rows[j], row_scales[j], kk);
          }
        }
        std::vector<uint8_t> p4(PackedBytes(WeightFormat::kMXFP4, n, k));
        PackRowsMXFP4(rows.data(), row_scales.data(), n, k, row_len, p4.data());
        std::vector<float> p32(PackedElements(n, k));
        PackRowsF32(frows.data(), n, k, k, p32.data());
        auto a = Random(m * k, m + k);
        std::vector<float> c4(m * n, -9.0f), c32(m * n, -7.0f);
        std::vector<const float*> a_rows(m);
        std::vector<float*> r4(m), r32(m);
        for (int64_t i = 0; i < m; ++i) {
          a_rows[i] = a.data() + i * k;
          r4[i] = c4.data() + i * n;
          r32[i] = c32.data() + i * n;
        }
        GemmPanels(a_rows.data(), m, k, p4.data(), WeightFormat::kMXFP4, 0,
                   NumPanels(n), Epilogue::kStore, n, r4.data());
        GemmPanels(a_rows.data(), m, k, p32.data(), WeightFormat::kF32, 0,
                   NumPanels(n), Epilogue::kStore, n, r32.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float got = c4[i * n + j], want = c32[i * n + j];
            if (m > 3) {
              ASSERT_EQ(got, want) << "m=" << m << " n=" << n << " k=" << k;
              continue;
            }
            double mag = 0;  // the rounding scale of the dot product
            for (int64_t kk = 0; kk < k; ++kk) {
              mag += std::fabs(double(a[i * k + kk]) * deq[j * k + kk]);
            }
            ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30)
                << "m=" << m << " n=" << n << " k=" << k;
          }
        }
      }
    }
  }
}

MOE_INSTANTIATE_ISA_TESTS(IsaTest);

TEST(PackedGemm, DispatcherPicksTheBestIsa) {
  const std::string isa = GemmIsaName();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "generic");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    EXPECT_EQ(isa, "avx512");
  }
  EXPECT_FALSE(SetGemmIsa("sse9"));
}

// ParallelGemm hands each task a run of panels for its rows; however the
// runs fall (threads, sizes), every output is the bit of one GemmPanels call
// over all panels.
TEST(ParallelGemm, EveryTaskSplitGivesTheSameBits) {
  for (int64_t m : {1, 13, 200, 1000}) {
    for (int64_t n : {32, 64, 100, 2048}) {
      const int64_t k = 70;
      auto a = Random(m * k, m + n), w = Random(n * k, n);
      std::vector<const float*> w_rows(n), a_rows(m);
      for (int64_t j = 0; j < n; ++j) w_rows[j] = w.data() + j * k;
      for (int64_t i = 0; i < m; ++i) a_rows[i] = a.data() + i * k;
      std::vector<float> packed(PackedElements(n, k));
      PackRowsF32(w_rows.data(), n, k, k, packed.data());
      auto run = [&](int threads) {
        std::vector<float> c(m * n, -9.0f);
        std::vector<float*> c_rows(m);
        for (int64_t i = 0; i < m; ++i) c_rows[i] = c.data() + i * n;
        if (threads == 0) {
          GemmPanels(a_rows.data(), m, k, packed.data(), WeightFormat::kF32, 0,
                     NumPanels(n), Epilogue::kStore, n, c_rows.data());
        } else {
          ParallelGemm(a_rows.data(), m, k, packed.data(), WeightFormat::kF32,
                       n, c_rows.data(), threads);
        }
        return c;
      };
      const std::vector<float> want = run(0);
      for (int threads : {1, 2, 3}) {
        const std::vector<float> got = run(threads);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
            << "m=" << m << " n=" << n << " threads=" << threads;
      }
    }
  }
}

// A short-K call whose weights fit in L2 runs row tile by row tile; a wider
// call (more panels) runs panel by panel. Both orders give the same bits.
TEST_P(IsaTest, ShortKOrderGivesTheSameBits) {
  const int64_t m = 37, n = 2048;
  for (int64_t k : {16, 100, 256}) {
    auto a = Random(m * k, k), w = Random(n * k, k + 1);
    std::vector<const float*> w_rows(n), a_rows(m);
    for (int64_t j = 0; j < n; ++j) w_rows[j] = w.data() + j * k;
    for (int64_t i = 0; i < m; ++i) a_rows[i] = a.data() + i * k;
    std::vector<float> packed(PackedElements(n, k));
    PackRowsF32(w_rows.data(), n, k, k, packed.data());
    std::vector<float> whole(m * n), by_panel(m * n);
    std::vector<float*> whole_rows(m), panel_rows(m);
    for (int64_t i = 0; i < m; ++i) {
      whole_rows[i] = whole.data() + i * n;
      panel_rows[i] = by_panel.data() + i * n;
    }
    GemmPanels(a_rows.data(), m, k, packed.data(), WeightFormat::kF32, 0,
               NumPanels(n), Epilogue::kStore, n, whole_rows.data());
    for (int64_t q = 0; q < NumPanels(n); ++q) {
      GemmPanels(a_rows.data(), m, k, packed.data(), WeightFormat::kF32, q,
                 q + 1, Epilogue::kStore, n, panel_rows.data());
    }
    ASSERT_EQ(0, std::memcmp(whole.data(), by_panel.data(), whole.size() * 4))
        << "k=" << k;
  }
}

// The activations of kernels/act_rule.h against their definitions, in
// double (tests/golden/README.md).
TEST(GatedAct, MatchesTheDefinitions) {
  const float alpha = 1.702f, L = 7.0f;
  for (float g : {-9.0f, -1.0f, 0.0f, 0.5f, 6.9f, 7.0f, 12.0f}) {
    for (float u : {-8.0f, -7.0f, -0.3f, 0.0f, 2.0f, 7.5f}) {
      const double gd = g, ud = u;
      const double silu = gd / (1 + std::exp(-gd)) * ud;
      const double gc = std::min(gd, 7.0), uc = std::clamp(ud, -7.0, 7.0);
      const double gptoss = (uc + 1) * gc / (1 + std::exp(-1.702 * gc));
      const double clamp = gc / (1 + std::exp(-gc)) * uc;
      EXPECT_NEAR(GatedAct(kActSilu, g, u, alpha, L), silu,
                  1e-5 * (1 + std::abs(silu)));
      EXPECT_NEAR(GatedAct(kActGptOss, g, u, alpha, L), gptoss,
                  1e-5 * (1 + std::abs(gptoss)));
      EXPECT_NEAR(GatedAct(kActSiluClamp, g, u, alpha, L), clamp,
                  1e-5 * (1 + std::abs(clamp)));
      // gelu_erf: the exact GELU; swiglustep: silu's OUTPUT capped at L.
      const double gelu = 0.5 * gd * (1 + std::erf(gd / std::sqrt(2.0))) * ud;
      const double step =
          std::min(gd / (1 + std::exp(-gd)), 7.0) * std::clamp(ud, -7.0, 7.0);
      EXPECT_NEAR(GatedAct(kActGeluErf, g, u, alpha, L), gelu,
                  1e-5 * (1 + std::abs(gelu)));
      EXPECT_NEAR(GatedAct(kActSwigluStep, g, u, alpha, L), step,
                  1e-5 * (1 + std::abs(step)));
    }
  }
  EXPECT_TRUE(std::isnan(GatedAct(kActGptOss, NAN, 1.0f, alpha, L)));
  EXPECT_TRUE(std::isnan(GatedAct(kActSiluClamp, 1.0f, NAN, alpha, L)));
  EXPECT_TRUE(std::isnan(GatedAct(kActSwigluStep, NAN, 1.0f, alpha, L)));
  EXPECT_TRUE(std::isnan(GatedAct(kActSwigluStep, 1.0f, NAN, alpha, L)));
  EXPECT_TRUE(std::isnan(GatedAct(kActGeluErf, NAN, 1.0f, alpha, L)));
  // Where silu_clamp and swiglustep part: g = 12 is capped to 7 before
  // silu by the one, silu(12) = 11.99993 is capped to 7 after it by the
  // other; at L = 20 only silu_clamp leaves g alone too.
  EXPECT_NEAR(GatedAct(kActSwigluStep, 12.0f, 1.0f, alpha, 20.0f),
              12.0 / (1 + std::exp(-12.0)), 1e-5);
  EXPECT_NEAR(GatedAct(kActSwigluStep, 12.0f, 1.0f, alpha, 7.0f), 7.0, 1e-6);
  EXPECT_NEAR(GatedAct(kActSiluClamp, 12.0f, 1.0f, alpha, 7.0f),
              7.0 / (1 + std::exp(-7.0)), 1e-5);
}

// Grouped experts with biases and each activation against a scalar loop:
// odd sizes (inter 37: a half-empty last panel; hidden 45), groups of 0, 1
// and several rows.
TEST(GroupedSwiglu, BiasesAndClampedActivations) {
  const int64_t H = 45, I = 37, ip = PaddedInter(I), groups = 3;
  const int64_t offsets[] = {0, 0, 1, 6};
  const int64_t rows = offsets[groups];
  uint64_t seed = 5;
  auto rnd = [&](float scale) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return scale * (static_cast<float>(seed >> 40) / 8388608.0f - 1.0f);
  };
  std::vector<float> x(rows * H), w1(groups * I * H), w3(groups * I * H),
      w2(groups * H * I), b1(groups * I), b3(groups * I), b2(groups * H);
  for (auto* v : {&x, &w1, &w3, &w2, &b1, &b3, &b2}) {
    for (float& f : *v) f = rnd(v == &x ? 2.0f : 0.5f);
  }
  std::vector<std::vector<float>> w13p(groups), w2p(groups);
  std::vector<const void*> w13_ptr(groups), w2_ptr(groups);
  std::vector<const float*> b1_ptr(groups), b3_ptr(groups), b2_ptr(groups);
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<int64_t> order(2 * ip);
    FusedGateUpRowOrder(I, order.data());
    std::vector<const float*> r13(2 * ip), r2(H);
    for (int64_t i = 0; i < 2 * ip; ++i) {
      const int64_t o = order[i];
      r13[i] = o == INT64_MIN ? nullptr
               : o >= 0       ? w1.data() + (g * I + o) * H
                              : w3.data() + (g * I - 1 - o) * H;
    }
    for (int64_t j = 0; j < H; ++j) r2[j] = w2.data() + (g * H + j) * I;
    w13p[g].resize(PackedElements(2 * ip, H));
    w2p[g].resize(PackedElements(H, ip));
    PackRowsF32(r13.data(), 2 * ip, H, H, w13p[g].data());
    PackRowsF32(r2.data(), H, ip, I, w2p[g].data());
    w13_ptr[g] = w13p[g].data();
    w2_ptr[g] = w2p[g].data();
    b1_ptr[g] = b1.data() + g * I;
    b3_ptr[g] = b3.data() + g * I;
    b2_ptr[g] = b2.data() + g * H;
  }
  for (int32_t act :
       {kActSilu, kActGptOss, kActSiluClamp, kActGeluErf, kActSwigluStep}) {
    SCOPED_TRACE(act);
    std::vector<float> out(rows * H, -1.0f);
    std::vector<const float*> in_rows(rows);
    std::vector<float*> out_rows(rows);
    for (int64_t r = 0; r < rows; ++r) {
      in_rows[r] = x.data() + r * H;
      out_rows[r] = out.data() + r * H;
    }
    GroupedSwiglu p;
    p.num_groups = groups;
    p.group_offsets = offsets;
    p.in_rows = in_rows.data();
    p.out_rows = out_rows.data();
    p.w13 = w13_ptr.data();
    p.w2 = w2_ptr.data();
    p.hidden = H;
    p.inter = I;
    p.b1 = b1_ptr.data();
    p.b3 = b3_ptr.data();
    p.b2 = b2_ptr.data();
    p.act = act;
    p.act_limit = 0.8f;  // clamps often at these scales
    const int64_t n = PlanGroupedSwiglu(p, 2, nullptr, 0);
    std::vector<SwigluTask> tasks(n);
    PlanGroupedSwiglu(p, 2, tasks.data(), n);
    std::vector<float> h(rows * ip), gu(rows * 2 * ip);
    std::vector<float*> h_rows(rows), gu_rows(rows);
    RunGroupedSwiglu(p, tasks.data(), n, h.data(), h_rows.data(), 2, gu.data(),
                     gu_rows.data());
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) {
        std::vector<double> hid(I);
        for (int64_t i = 0; i < I; ++i) {
          double a = b1[g * I + i], b = b3[g * I + i];
          for (int64_t j = 0; j < H; ++j) {
            a += double(w1[(g * I + i) * H + j]) * x[r * H + j];
            b += double(w3[(g * I + i) * H + j]) * x[r * H + j];
          }
          const bool clamps = act == kActGptOss || act == kActSiluClamp;
          const double gc = clamps ? std::min(a, 0.8) : a;
          const double uc =
              clamps || act == kActSwigluStep ? std::clamp(b, -0.8, 0.8) : b;
          if (act == kActGeluErf) {
            hid[i] = 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))) * b;
          } else if (act == kActSwigluStep) {
            hid[i] = std::min(a / (1 + std::exp(-a)), 0.8) * uc;
          } else {
            hid[i] = act == kActGptOss
                         ? (uc + 1) * gc / (1 + std::exp(-1.702 * gc))
                         : gc / (1 + std::exp(-gc)) * uc;
          }
        }
        for (int64_t j = 0; j < H; ++j) {
          double want = b2[g * H + j];
          for (int64_t i = 0; i < I; ++i) {
            want += double(w2[(g * H + j) * I + i]) * hid[i];
          }
          EXPECT_NEAR(out[r * H + j], want, 1e-4 + 1e-4 * std::abs(want))
              << "row " << r << " col " << j;
        }
      }
    }
  }
}

TEST(GroupedSwiglu, PlanCoversEveryRowAndPanelOnce) {
  const int64_t offsets[] = {0, 0, 300, 301, 301, 350};
  GroupedSwiglu p;
  p.num_groups = 5;
  p.group_offsets = offsets;
  p.hidden = 100;
  p.inter = 70;
  const int64_t n = PlanGroupedSwiglu(p, 2, nullptr, 0);
  std::vector<SwigluTask> tasks(n);
  ASSERT_EQ(PlanGroupedSwiglu(p, 2, tasks.data(), n), n);
  const int64_t up_panels = 2 * PaddedInter(70) / 32,
                down_panels = NumPanels(100);
  std::vector<int> cover0(350 * up_panels, 0), cover1(350 * down_panels, 0);
  bool seen_down = false;
  for (const auto& t : tasks) {
    if (t.phase == 1) seen_down = true;
    ASSERT_FALSE(t.phase == 0 && seen_down) << "phases interleaved";
    EXPECT_GE(t.row_begin, offsets[t.group]);
    EXPECT_LE(t.row_end, offsets[t.group + 1]);
    for (int64_t r = t.row_begin; r < t.row_end; ++r) {
      for (int64_t q = t.panel_begin; q < t.panel_end; ++q) {
        (t.phase == 0 ? cover0[r * up_panels + q]
                      : cover1[r * down_panels + q])++;
      }
    }
  }
  for (int c : cover0) EXPECT_EQ(c, 1);
  for (int c : cover1) EXPECT_EQ(c, 1);
}

}  // namespace
}  // namespace moe::kernels::cpu

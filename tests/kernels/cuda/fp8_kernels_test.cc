// The FP8 kernels (kernels/cuda/fp8.cu) against the host rule
// (kernels/fp8_rule.h) on the same inputs: gathered rows quantised per row
// per 128 channels with codes and scales bit for bit where the segment
// tables put them, the SiLU-mul's quantised h, and block-scaled weights
// dequantised to bf16 bit for bit. Any CUDA device (nothing here needs
// sm_90); skips, with the reason, when none is visible.
#include <cuda_runtime_api.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "gtest/gtest.h"
#include "kernels/cuda/kernels.h"
#include "kernels/fp8_rule.h"
#include "tests/testutil/cuda_test_util.h"

namespace moe {
namespace {

namespace k = kernels;
namespace kcu = kernels::cuda;

class CudaFp8KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
      GTEST_SKIP() << s.message();
    }
  }
  static std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = F32ToBf16(d(rng) * (rng() % 7 == 0 ? 40.0f : 1.0f));
    return v;
  }
  // Segments from per-segment row counts.
  static kcu::Fp8Segments Segments(const std::vector<int>& rows) {
    kcu::Fp8Segments s;
    s.count = static_cast<int32_t>(rows.size());
    int end = 0;
    for (size_t g = 0; g < rows.size(); ++g) s.end[g] = end += rows[g];
    return s;
  }
  // Host quantisation of row `v` into codes and the scale table.
  static void HostQuantise(const float* v, int64_t cols, int64_t ld,
                           int64_t base, int64_t m, int64_t r, uint8_t* codes,
                           float* scale) {
    for (int64_t kb = 0; kb < k::Fp8Blocks(cols); ++kb) {
      float amax = 0;
      const int64_t c1 = std::min(cols, (kb + 1) * k::kFp8Block);
      for (int64_t c = kb * k::kFp8Block; c < c1; ++c) {
        amax = std::max(amax, std::fabs(v[c]));
      }
      const float s = k::Fp8BlockScale(amax);
      scale[k::Fp8ActScaleIndex(base, m, r, kb)] = s;
      for (int64_t c = kb * k::kFp8Block; c < c1; ++c) {
        codes[c] = k::E4M3FromF32(v[c] / s);
      }
    }
    for (int64_t c = cols; c < ld; ++c) codes[c] = 0;
  }
};

TEST_F(CudaFp8KernelTest, GatheredRowsQuantiseAsTheHostRuleSays) {
  const int64_t cols = 300, ld = 304;  // a partial third block, padding
  const std::vector<int> seg_rows = {5, 0, 17, 1, 9};
  const int64_t rows = 32, src_rows = 40;
  const auto src = RandomBf16(src_rows * cols, 1);
  std::vector<int32_t> idx(rows);
  std::mt19937 rng(2);
  for (auto& i : idx) i = static_cast<int32_t>(rng() % src_rows);
  const auto seg = Segments(seg_rows);
  const int64_t floats = k::Fp8ActScaleFloats(rows, seg.count, cols);
  std::vector<uint8_t> want_codes(rows * ld);
  std::vector<float> want_scale(floats, -1.0f);
  int64_t begin = 0;
  for (int g = 0; g < seg.count; ++g) {
    const int64_t base = k::Fp8SegmentScaleBase(begin, g, cols);
    for (int r = 0; r < seg_rows[g]; ++r) {
      std::vector<float> v(cols);
      for (int64_t c = 0; c < cols; ++c) {
        v[c] = Bf16ToF32(src[idx[begin + r] * cols + c]);
      }
      HostQuantise(v.data(), cols, ld, base, seg_rows[g], r,
                   want_codes.data() + (begin + r) * ld, want_scale.data());
    }
    begin += seg_rows[g];
  }
  DeviceBuffer d_src = testing::Upload(src), d_idx = testing::Upload(idx);
  DeviceBuffer codes = testing::Upload(std::vector<uint8_t>(rows * ld, 0xaa));
  DeviceBuffer scale = testing::Upload(std::vector<float>(floats, -1.0f));
  ASSERT_EQ(kcu::QuantizeRowsFp8(
                d_src.as<uint16_t>(), cols, d_idx.as<int32_t>(), rows, seg, ld,
                codes.as<uint8_t>(), scale.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(testing::Download<uint8_t>(codes, rows * ld), want_codes);
  EXPECT_EQ(testing::Download<float>(scale, floats), want_scale);
}

TEST_F(CudaFp8KernelTest, RefusesSegmentsThatDoNotCoverTheRows) {
  const auto seg = Segments({3, 4});
  EXPECT_EQ(kcu::QuantizeRowsFp8(nullptr, 16, nullptr, 8, seg, 16, nullptr,
                                 nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kcu::QuantizeRowsFp8(nullptr, 16, nullptr, 7, seg, 8, nullptr,
                                 nullptr, nullptr),
            cudaErrorInvalidValue);  // row stride below the row
}

TEST_F(CudaFp8KernelTest, SiluMulQuantisesHForTheDownProjection) {
  const int64_t inter = 200, up = 256, gu_ld = 512, ld = 208, rows = 11;
  const std::vector<int> seg_rows = {4, 7};
  const auto gate_up = RandomBf16(rows * gu_ld, 3);
  const auto seg = Segments(seg_rows);
  const int64_t floats = k::Fp8ActScaleFloats(rows, seg.count, inter);
  DeviceBuffer d_gu = testing::Upload(gate_up);
  DeviceBuffer codes = testing::Upload(std::vector<uint8_t>(rows * ld, 0xaa));
  DeviceBuffer scale = testing::Upload(std::vector<float>(floats, -1.0f));
  ASSERT_EQ(
      kcu::SiluMulQuantFp8(d_gu.as<uint16_t>(), gu_ld, up, inter, rows, seg, ld,
                           codes.as<uint8_t>(), scale.as<float>(), nullptr),
      cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got_codes = testing::Download<uint8_t>(codes, rows * ld);
  const auto got_scale = testing::Download<float>(scale, floats);
  int64_t begin = 0;
  for (int g = 0; g < seg.count; ++g) {
    const int64_t base = k::Fp8SegmentScaleBase(begin, g, inter);
    for (int r = 0; r < seg_rows[g]; ++r) {
      const int64_t row = begin + r;
      std::vector<float> h(inter);
      for (int64_t i = 0; i < inter; ++i) {
        const float gv = Bf16ToF32(gate_up[row * gu_ld + i]);
        const float uv = Bf16ToF32(gate_up[row * gu_ld + up + i]);
        h[i] = gv / (1.0f + std::exp(-gv)) * uv;
      }
      for (int64_t kb = 0; kb < k::Fp8Blocks(inter); ++kb) {
        const float s =
            got_scale[k::Fp8ActScaleIndex(base, seg_rows[g], r, kb)];
        float amax = 0;
        for (int64_t i = kb * 128; i < std::min(inter, (kb + 1) * 128); ++i) {
          amax = std::max(amax, std::fabs(h[i]));
        }
        // expf on the device and std::exp here may differ by an ulp.
        EXPECT_NEAR(s, k::Fp8BlockScale(amax), 1e-5f * s) << row << "," << kb;
        for (int64_t i = kb * 128; i < std::min(inter, (kb + 1) * 128); ++i) {
          const float got = k::E4M3ToF32(got_codes[row * ld + i]) * s;
          EXPECT_NEAR(got, h[i], std::fabs(h[i]) / 15 + s / 256)
              << row << "," << i;
        }
      }
      for (int64_t i = inter; i < ld; ++i) {
        EXPECT_EQ(got_codes[row * ld + i], 0) << "padding " << row << "," << i;
      }
    }
    begin += seg_rows[g];
  }
}

TEST_F(CudaFp8KernelTest, DequantisesBlockScaledWeightsAsTheCpuDoes) {
  const int64_t rows = 200, cols = 272, code_ld = 272;
  const int64_t sld = k::Fp8WeightScaleLd(cols);
  std::mt19937 rng(4);
  std::vector<uint8_t> codes(rows * code_ld);
  for (auto& c : codes) {
    c = static_cast<uint8_t>(rng() % 256);
    if ((c & 0x7f) == 0x7f) c = 0x10;  // no NaN codes
  }
  std::vector<float> scale(k::Fp8WeightScaleFloats(rows, cols));
  for (auto& s : scale) s = 0.001f * (1 + rng() % 1000);
  DeviceBuffer d_codes = testing::Upload(codes),
               d_scale = testing::Upload(scale);
  DeviceBuffer out = testing::Upload(std::vector<uint16_t>(rows * cols, 0));
  ASSERT_EQ(kcu::DequantizeFp8ToBf16(d_codes.as<uint8_t>(), rows, cols, code_ld,
                                     d_scale.as<float>(), sld,
                                     out.as<uint16_t>(), cols, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = testing::Download<uint16_t>(out, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v =
          F8E4M3ToF32(codes[r * code_ld + c]) * scale[r / 128 * sld + c / 128];
      ASSERT_EQ(got[r * cols + c], F32ToBf16(v)) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace moe

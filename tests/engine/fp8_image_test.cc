// The host side of FP8 experts on a GPU (engine/cuda/fp8_image.h), on the
// CPU: the path each compute capability gets, and the device form of an
// expert: checkpoint codes and scales kept byte for byte where their
// blocks tile 128 x 128, W3 on a block boundary, zero padding, the value of
// every element equal to the CPU's dequantisation, requantisation of other
// block shapes, and shape errors that name the tensor.
#include "engine/cuda/fp8_image.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/weight_values.h"
#include "gtest/gtest.h"
#include "kernels/fp8_rule.h"
#ifdef MOE_HAVE_CUDA
#include "kernels/cuda/kernels.h"
#endif

namespace moe {
namespace {

TEST(ChooseFp8GpuPath, BlockScaledOnSm90Only) {
  const Fp8PathChoice h100 = ChooseFp8GpuPath(9, 0, 7168, 32);
  EXPECT_EQ(h100.path, Fp8GpuPath::kBlockScaled);
  EXPECT_NE(h100.reason.find("sm_90"), std::string::npos) << h100.reason;
  for (auto [major, minor] :
       {std::pair{8, 0}, {8, 6}, {8, 9}, {10, 0}, {12, 0}, {7, 5}}) {
    const Fp8PathChoice c = ChooseFp8GpuPath(major, minor, 7168, 32);
    EXPECT_EQ(c.path, Fp8GpuPath::kDequantBf16) << major << "." << minor;
    EXPECT_NE(c.reason.find("sm_" + std::to_string(major * 10 + minor)),
              std::string::npos)
        << c.reason;
  }
}

TEST(ChooseFp8GpuPath, OddHiddenOrTooManyExpertsDequantise) {
  const Fp8PathChoice odd = ChooseFp8GpuPath(9, 0, 72, 8);
  EXPECT_EQ(odd.path, Fp8GpuPath::kDequantBf16);
  EXPECT_NE(odd.reason.find("hidden size 72"), std::string::npos) << odd.reason;
  EXPECT_EQ(ChooseFp8GpuPath(9, 0, 7168, 256).path, Fp8GpuPath::kBlockScaled);
  const Fp8PathChoice many = ChooseFp8GpuPath(9, 0, 7168, 257);
  EXPECT_EQ(many.path, Fp8GpuPath::kDequantBf16);
  EXPECT_NE(many.reason.find("257"), std::string::npos) << many.reason;
}

#ifdef MOE_HAVE_CUDA
TEST(ChooseFp8GpuPath, ExpertLimitIsTheKernelsSegmentLimit) {
  EXPECT_EQ(ChooseFp8GpuPath(9, 0, 64, kernels::cuda::kMaxFp8Segments).path,
            Fp8GpuPath::kBlockScaled);
  EXPECT_EQ(ChooseFp8GpuPath(9, 0, 64, kernels::cuda::kMaxFp8Segments + 1).path,
            Fp8GpuPath::kDequantBf16);
}
#endif

std::vector<float> Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

WeightTensor F32Tensor(const std::string& name, const std::vector<float>& v,
                       int64_t rows, int64_t cols) {
  WeightTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = {rows, cols};
  t.owned.resize(v.size() * 4);
  std::memcpy(t.owned.data(), v.data(), t.owned.size());
  t.data = t.owned.data();
  return t;
}

// A DeepSeek-V3 style FP8 tensor: codes and weight_scale_inv blocks of
// block_rows x block_cols (edges partial).
WeightTensor Fp8Tensor(const std::string& name, const std::vector<float>& v,
                       int64_t rows, int64_t cols, int64_t block_rows,
                       int64_t block_cols) {
  WeightTensor t;
  t.name = name;
  t.dtype = DType::kF8E4M3;
  t.shape = {rows, cols};
  t.block_rows = block_rows;
  t.block_cols = block_cols;
  const int64_t sc = (cols + block_cols - 1) / block_cols;
  t.block_scale.assign((rows + block_rows - 1) / block_rows * sc, 1.0f);
  t.owned.resize(rows * cols);
  for (int64_t rb = 0; rb * block_rows < rows; ++rb) {
    for (int64_t cb = 0; cb < sc; ++cb) {
      float amax = 0;
      for (int64_t i = rb * block_rows;
           i < std::min(rows, (rb + 1) * block_rows); ++i) {
        for (int64_t j = cb * block_cols;
             j < std::min(cols, (cb + 1) * block_cols); ++j) {
          amax = std::max(amax, std::fabs(v[i * cols + j]));
        }
      }
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      t.block_scale[rb * sc + cb] = s;
      for (int64_t i = rb * block_rows;
           i < std::min(rows, (rb + 1) * block_rows); ++i) {
        for (int64_t j = cb * block_cols;
             j < std::min(cols, (cb + 1) * block_cols); ++j) {
          t.owned[i * cols + j] =
              static_cast<std::byte>(F32ToF8E4M3(v[i * cols + j] / s));
        }
      }
    }
  }
  t.data = t.owned.data();
  return t;
}

// Every element of the image against the CPU's dequantised values of the
// same tensors (exact: both are code times scale in fp32), the padding 0.
void ExpectSameValues(const Fp8ExpertImage& e, const WeightTensor& w1,
                      const WeightTensor& w3, const WeightTensor& w2) {
  const int64_t H = e.hidden, I = e.inter;
  auto v1 = WeightsAsF32(w1), v3 = WeightsAsF32(w3), v2 = WeightsAsF32(w2);
  ASSERT_TRUE(v1.ok() && v3.ok() && v2.ok());
  for (int64_t r = 0; r < 2 * e.inter_pad; ++r) {
    for (int64_t c = 0; c < e.hidden_k; ++c) {
      float want = 0;
      if (r < I && c < H) want = v1->data[r * H + c];
      if (r >= e.inter_pad && r - e.inter_pad < I && c < H) {
        want = v3->data[(r - e.inter_pad) * H + c];
      }
      ASSERT_EQ(Fp8W13Value(e, r, c), want) << "w13 [" << r << ", " << c << "]";
    }
  }
  for (int64_t r = 0; r < H; ++r) {
    for (int64_t c = 0; c < e.down_k; ++c) {
      const float want = c < I ? v2->data[r * I + c] : 0.0f;
      ASSERT_EQ(Fp8W2Value(e, r, c), want) << "w2 [" << r << ", " << c << "]";
    }
  }
}

TEST(PackFp8Expert, KeepsCheckpointCodesAndScalesInPlace) {
  // I = 200: W3 starts at row 256 (Ip), h rows are 256 (Ik) long; H = 272
  // pads to 384 (Hk): no matmul gets a partial block along K.
  const int64_t H = 272, I = 200;
  const auto f1 = Random(I * H, 1, 0.3f), f3 = Random(I * H, 2, 0.1f),
             f2 = Random(H * I, 3, 0.2f);
  const WeightTensor w1 = Fp8Tensor("w1", f1, I, H, 128, 128);
  const WeightTensor w3 = Fp8Tensor("w3", f3, I, H, 128, 128);
  const WeightTensor w2 = Fp8Tensor("w2", f2, H, I, 128, 128);
  auto e = PackFp8Expert(w1, w3, w2);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->hidden_k, 384);
  EXPECT_EQ(e->inter_pad, 256);
  EXPECT_EQ(e->down_k, 256);
  ASSERT_EQ(e->w13.size(), static_cast<size_t>(2 * 256 * 384));
  ASSERT_EQ(e->w13_scale.size(),
            static_cast<size_t>(kernels::Fp8WeightScaleFloats(512, 384)));
  ASSERT_EQ(e->w2.size(), static_cast<size_t>(H * 256));
  ASSERT_EQ(e->w2_scale.size(),
            static_cast<size_t>(kernels::Fp8WeightScaleFloats(H, 256)));
  // Codes byte for byte: W1 row 5, W3 row 7 at row Ip + 7, W2 row 9.
  const auto* c1 = reinterpret_cast<const uint8_t*>(w1.data);
  const auto* c3 = reinterpret_cast<const uint8_t*>(w3.data);
  const auto* c2 = reinterpret_cast<const uint8_t*>(w2.data);
  EXPECT_EQ(std::memcmp(e->w13.data() + 5 * 384, c1 + 5 * H, H), 0);
  EXPECT_EQ(std::memcmp(e->w13.data() + (256 + 7) * 384, c3 + 7 * H, H), 0);
  EXPECT_EQ(std::memcmp(e->w2.data() + 9 * 256, c2 + 9 * I, I), 0);
  // Scales where cuBLASLt reads them: W3's block (1, 2) at row block 2 + 1.
  const int64_t ld = kernels::Fp8WeightScaleLd(H);
  EXPECT_EQ(ld, 4);
  EXPECT_EQ(e->w13_scale[(2 + 1) * ld + 2], w3.block_scale[1 * 3 + 2]);
  EXPECT_EQ(e->w13_scale[0 * ld + 1], w1.block_scale[1]);
  EXPECT_EQ(e->w2_scale[2 * kernels::Fp8WeightScaleLd(256) + 1],
            w2.block_scale[2 * 2 + 1]);
  ExpectSameValues(*e, w1, w3, w2);
}

TEST(PackFp8Expert, QuantisesFloatWeightsAsTheCpuDoes) {
  const int64_t H = 64, I = 24;  // qwen2_moe_like's sizes
  const WeightTensor w1 = F32Tensor("w1", Random(I * H, 4, 0.2f), I, H);
  const WeightTensor w3 = F32Tensor("w3", Random(I * H, 5, 0.2f), I, H);
  const WeightTensor w2 = F32Tensor("w2", Random(H * I, 6, 0.2f), H, I);
  auto e = PackFp8Expert(w1, w3, w2);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->hidden_k, 128);
  EXPECT_EQ(e->inter_pad, 128);
  EXPECT_EQ(e->down_k, 128);
  for (const auto& [t, rows, cols, value] :
       {std::tuple{&w1, I, H, 0}, {&w3, I, H, 1}, {&w2, H, I, 2}}) {
    auto q = WeightsAsFp8(*t);
    ASSERT_TRUE(q.ok()) << q.status();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float want =
            F8E4M3ToF32(q->codes[r * cols + c]) * q->row_scales(r)[c / 128];
        const float got = value == 0   ? Fp8W13Value(*e, r, c)
                          : value == 1 ? Fp8W13Value(*e, 128 + r, c)
                                       : Fp8W2Value(*e, r, c);
        ASSERT_EQ(got, want) << value << " [" << r << ", " << c << "]";
      }
    }
  }
}

TEST(PackFp8Expert, RequantisesBlocksThatDoNotTileByRows) {
  // 64-row checkpoint blocks: one of our 128-row blocks would need two
  // scales, so the values are requantised in 128 x 128 blocks.
  const int64_t H = 128, I = 160;
  const auto f1 = Random(I * H, 7, 0.5f);
  const WeightTensor w1 = Fp8Tensor("w1", f1, I, H, 64, 128);
  const WeightTensor w3 =
      Fp8Tensor("w3", Random(I * H, 8, 0.5f), I, H, 64, 128);
  const WeightTensor w2 =
      Fp8Tensor("w2", Random(H * I, 9, 0.5f), H, I, 64, 128);
  auto e = PackFp8Expert(w1, w3, w2);
  ASSERT_TRUE(e.ok()) << e.status();
  auto deq = WeightsAsF32(w1);
  ASSERT_TRUE(deq.ok());
  // Within one E4M3 step (2^-3 relative to the block's amax) of the
  // checkpoint's own values.
  for (int64_t r = 0; r < I; ++r) {
    const float s = e->w13_scale[r / 128 * kernels::Fp8WeightScaleLd(H)];
    for (int64_t c = 0; c < H; ++c) {
      const float want = deq->data[r * H + c];
      EXPECT_NEAR(Fp8W13Value(*e, r, c), want,
                  std::max(std::fabs(want) / 16, s / 512) + 1e-12f)
          << r << ", " << c;
    }
  }
  // Blocks with 256 rows tile ours: kept as they are.
  const WeightTensor k1 = Fp8Tensor("k1", f1, I, H, 256, 128);
  auto kept = PackFp8Expert(k1, w3, w2);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(std::memcmp(kept->w13.data(), k1.data, I * H), 0);
}

// Each part applied as kernels/cuda/fp8.cu's DequantizeFp8ToBf16 applies
// it (that kernel is held to this formula by CudaFp8KernelTest), into the
// bf16 form's w13 and w2.
void ApplyDequantParts(const Fp8ExpertImage& e,
                       const std::vector<Fp8DequantPart>& parts,
                       std::vector<uint16_t>* w13, std::vector<uint16_t>* w2) {
  for (const Fp8DequantPart& p : parts) {
    const uint8_t* codes = (p.to_w2 ? e.w2 : e.w13).data() + p.code_offset;
    const float* scale =
        (p.to_w2 ? e.w2_scale : e.w13_scale).data() + p.scale_offset;
    uint16_t* dst = (p.to_w2 ? *w2 : *w13).data() + p.dst_offset;
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        dst[r * p.dst_ld + c] =
            F32ToBf16(kernels::E4M3ToF32(codes[r * p.code_ld + c]) *
                      scale[r / kernels::kFp8Block * p.scale_ld +
                            c / kernels::kFp8Block]);
      }
    }
  }
}

TEST(Fp8DequantParts, GiveTheBf16FormTheCpuDequantisesTo) {
  // What a GPU without block-scaled FP8 uploads: each part applied as
  // kernels/cuda/fp8.cu's DequantizeFp8ToBf16 applies it (that kernel is
  // held to this formula by CudaFp8KernelTest) must give, bit for bit, the
  // bf16 values the bf16 path gets from the same checkpoint.
  const int64_t H = 272, I = 200;
  const WeightTensor w1 =
      Fp8Tensor("w1", Random(I * H, 11, 0.3f), I, H, 128, 128);
  const WeightTensor w3 =
      Fp8Tensor("w3", Random(I * H, 12, 0.2f), I, H, 128, 128);
  const WeightTensor w2 =
      Fp8Tensor("w2", Random(H * I, 13, 0.1f), H, I, 128, 128);
  auto e = PackFp8Expert(w1, w3, w2);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<uint16_t> w13(2 * I * H, 0xffff), down(H * I, 0xffff);
  ApplyDequantParts(*e, Fp8DequantParts(*e), &w13, &down);
  auto b1 = WeightsAsBf16(w1), b3 = WeightsAsBf16(w3), b2 = WeightsAsBf16(w2);
  ASSERT_TRUE(b1.ok() && b3.ok() && b2.ok());
  EXPECT_TRUE(std::equal(b1->data, b1->data + I * H, w13.begin()));
  EXPECT_TRUE(std::equal(b3->data, b3->data + I * H, w13.begin() + I * H));
  EXPECT_TRUE(std::equal(b2->data, b2->data + H * I, down.begin()));
}

// A non-gated expert (Nemotron 3, relu2 of u alone) at a latent width
// that is no whole 128-block: W3's rows from row 0, then zero rows up to
// Ip; dequantised, the bf16 form's w13 is W3 [I, W] alone.
TEST(PackFp8Expert, NonGatedExpertsKeepW3AloneFromRowZero) {
  const int64_t W = 40, I = 200;
  const WeightTensor w3 =
      Fp8Tensor("w3", Random(I * W, 21, 0.2f), I, W, 128, 128);
  const WeightTensor w2 =
      Fp8Tensor("w2", Random(W * I, 22, 0.1f), W, I, 128, 128);
  auto e = PackFp8Expert(nullptr, w3, w2);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->gated);
  EXPECT_EQ(e->hidden, W);
  EXPECT_EQ(e->hidden_k, 128);
  EXPECT_EQ(e->inter_pad, 256);
  ASSERT_EQ(static_cast<int64_t>(e->w13.size()), e->inter_pad * e->hidden_k);
  auto v3 = WeightsAsF32(w3), v2 = WeightsAsF32(w2);
  ASSERT_TRUE(v3.ok() && v2.ok());
  for (int64_t r = 0; r < e->inter_pad; ++r) {
    for (int64_t c = 0; c < e->hidden_k; ++c) {
      const float want = r < I && c < W ? v3->data[r * W + c] : 0.0f;
      ASSERT_EQ(Fp8W13Value(*e, r, c), want)
          << "w13 [" << r << ", " << c << "]";
    }
  }
  for (int64_t r = 0; r < W; ++r) {
    for (int64_t c = 0; c < e->down_k; ++c) {
      const float want = c < I ? v2->data[r * I + c] : 0.0f;
      ASSERT_EQ(Fp8W2Value(*e, r, c), want) << "w2 [" << r << ", " << c << "]";
    }
  }
  const std::vector<Fp8DequantPart> parts = Fp8DequantParts(*e);
  ASSERT_EQ(parts.size(), 2u);
  std::vector<uint16_t> w13(I * W, 0xffff), down(W * I, 0xffff);
  ApplyDequantParts(*e, parts, &w13, &down);
  auto b3 = WeightsAsBf16(w3), b2 = WeightsAsBf16(w2);
  ASSERT_TRUE(b3.ok() && b2.ok());
  EXPECT_TRUE(std::equal(b3->data, b3->data + I * W, w13.begin()));
  EXPECT_TRUE(std::equal(b2->data, b2->data + W * I, down.begin()));
}

TEST(PackFp8Expert, RefusesMismatchedShapesNamingTheTensor) {
  const WeightTensor w1 = F32Tensor("layer.w1", Random(8 * 32, 1, 1), 8, 32);
  const WeightTensor w3 = F32Tensor("layer.w3", Random(8 * 16, 1, 1), 8, 16);
  const WeightTensor w2 = F32Tensor("layer.w2", Random(32 * 8, 1, 1), 32, 8);
  auto e = PackFp8Expert(w1, w3, w2);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("layer.w3"), std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace moe

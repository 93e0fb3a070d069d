// The released quantised forms of gpt-oss and DeepSeek-V4 read by
// HfCheckpoint: MXFP4 experts come out as MXFP4 tensors whose
// values are the golden weights exactly (gpt-oss's gate/up rows
// de-interleaved), V4's FP8 shared expert with its E8M0 block scales; bad
// scales (shape, dtype, 255) and bad weights are refused naming the tensor.
#include <filesystem>
#include <string>
#include <vector>

#include "core/hf_checkpoint.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/mxfp4_rule.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayer = 1;

struct Written {
  testing::GoldenCase c;
  std::string dir;
};

Written Write(const std::string& golden, HfFamily family) {
  Written w;
  auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + golden +
                                   ".safetensors");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return w;
  w.c = *std::move(c);
  testing::HfWriteOptions o;
  o.family = family;
  o.layer = kLayer;
  o.released = true;
  w.dir = testing::MakeTempDir(golden + "_");
  const absl::Status s = testing::WriteHfCheckpoint(w.c, o, w.dir);
  EXPECT_TRUE(s.ok()) << s;
  return w;
}

// Every value of `t` (MXFP4 or block-scaled FP8, [rows, cols]) against
// `want` (row-major), exactly.
void ExpectValues(const WeightTensor& t, const float* want) {
  ASSERT_EQ(t.shape.size(), 2u);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const auto* p = reinterpret_cast<const uint8_t*>(t.data);
  int64_t wrong = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float v;
      if (t.is_mxfp4()) {
        v = kernels::Mxfp4Value(p + i * cols / 2,
                                t.mx_scale.data() + i * cols / 32, j);
      } else {
        const int64_t sc = (cols + t.block_cols - 1) / t.block_cols;
        v = F8E4M3ToF32(p[i * cols + j]) *
            t.block_scale[(i / t.block_rows) * sc + j / t.block_cols];
      }
      wrong += v != want[i * cols + j];
    }
  }
  EXPECT_EQ(wrong, 0) << t.name;
}

// The bytes of tensor `name` in a checkpoint directory.
std::vector<uint8_t> TensorBytes(const std::string& dir,
                                 const std::string& name, DType* dtype,
                                 std::vector<int64_t>* shape) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    auto f = SafetensorsFile::Open(e.path().string());
    if (!f.ok() || !(*f)->Has(name)) continue;
    auto ref = (*f)->Get(name);
    EXPECT_TRUE(ref.ok());
    *dtype = ref->entry->dtype;
    *shape = ref->entry->shape;
    const auto* b = reinterpret_cast<const uint8_t*>(ref->data);
    return std::vector<uint8_t>(b, b + ref->nbytes());
  }
  ADD_FAILURE() << "no tensor " << name << " in " << dir;
  return {};
}

// Opens the checkpoint and asks for `role`: the error must name `tensor`
// and mention `what`.
void ExpectRefused(const std::string& dir, WeightRole role, int64_t expert,
                   const std::string& tensor, const std::string& what) {
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto t = (*ckpt)->Get(kLayer, role, expert);
  ASSERT_FALSE(t.ok()) << tensor;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(tensor), absl::string_view::npos)
      << t.status();
  EXPECT_NE(t.status().message().find(what), absl::string_view::npos)
      << t.status();
}

TEST(HfReleased, GptOssBlocksDecodeToTheGoldenWeights) {
  Written w = Write("gptoss_like", HfFamily::kGptOss);
  auto ckpt = HfCheckpoint::Open(w.dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const int64_t H = w.c.config.hidden, I = w.c.config.inter;
  for (int64_t e : {int64_t{0}, w.c.config.num_experts - 1}) {
    for (WeightRole r : {WeightRole::kW1, WeightRole::kW3, WeightRole::kW2}) {
      auto t = (*ckpt)->Get(kLayer, r, e);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_TRUE(t->is_mxfp4());
      const std::vector<float>& src = r == WeightRole::kW1   ? w.c.w1
                                      : r == WeightRole::kW3 ? w.c.w3
                                                             : w.c.w2;
      ExpectValues(*t, src.data() + e * I * H);
    }
  }
  fs::remove_all(w.dir);
}

TEST(HfReleased, DeepseekV4Fp4ExpertsAndFp8SharedDecodeExactly) {
  Written w = Write("deepseek_v4_like", HfFamily::kDeepseekV4);
  auto ckpt = HfCheckpoint::Open(w.dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const int64_t H = w.c.config.hidden, I = w.c.config.inter;
  auto w2 = (*ckpt)->Get(kLayer, WeightRole::kW2, 5);
  ASSERT_TRUE(w2.ok()) << w2.status();
  EXPECT_TRUE(w2->is_mxfp4());
  ExpectValues(*w2, w.c.w2.data() + 5 * I * H);
  auto sw1 = (*ckpt)->Get(kLayer, WeightRole::kSharedW1, -1);
  ASSERT_TRUE(sw1.ok()) << sw1.status();
  EXPECT_EQ(sw1->dtype, DType::kF8E4M3);
  ExpectValues(*sw1, w.c.sw1.data());
  fs::remove_all(w.dir);
}

TEST(HfReleased, GptOssBadScalesAreRefusedNamingTheTensor) {
  Written w = Write("gptoss_like", HfFamily::kGptOss);
  const std::string name = "model.layers.1.mlp.experts.gate_up_proj_scales";
  DType dtype;
  std::vector<int64_t> shape;
  const std::vector<uint8_t> good = TensorBytes(w.dir, name, &dtype, &shape);
  ASSERT_EQ(dtype, DType::kU8);
  // Wrong shape: one scale too few per row.
  std::vector<int64_t> bad_shape = shape;
  bad_shape.back() -= 1;
  std::vector<uint8_t> fewer(good.size() / shape.back() * bad_shape.back(),
                             127);
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, name, DType::kU8, bad_shape, fewer)
          .ok());
  ExpectRefused(w.dir, WeightRole::kW1, 0, name, "shape");
  // Wrong dtype.
  std::vector<uint8_t> wide(good.size() * 2, 0);
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, name, DType::kBF16, shape, wide)
          .ok());
  ExpectRefused(w.dir, WeightRole::kW3, 0, name, "dtype");
  // A NaN scale in expert 2's up rows (row 2j + 1).
  std::vector<uint8_t> nan = good;
  nan[(2 * 2 * w.c.config.inter + 3) * shape.back()] = 255;
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, name, DType::kU8, shape, nan).ok());
  ExpectRefused(w.dir, WeightRole::kW3, 2, name, "255");
  fs::remove_all(w.dir);
}

TEST(HfReleased, DeepseekV4BadScalesAndWeightsAreRefusedNamingTheTensor) {
  Written w = Write("deepseek_v4_like", HfFamily::kDeepseekV4);
  const std::string weight = "layers.1.ffn.experts.3.w1.weight";
  const std::string scale = "layers.1.ffn.experts.3.w1.scale";
  DType dtype;
  std::vector<int64_t> shape;
  const std::vector<uint8_t> good = TensorBytes(w.dir, scale, &dtype, &shape);
  ASSERT_EQ(dtype, DType::kF8E8M0);
  // U8 is not the release's F8_E8M0.
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, scale, DType::kU8, shape, good)
          .ok());
  ExpectRefused(w.dir, WeightRole::kW1, 3, scale, "dtype");
  std::vector<uint8_t> nan = good;
  nan[7] = 255;
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, scale, DType::kF8E8M0, shape, nan)
          .ok());
  ExpectRefused(w.dir, WeightRole::kW1, 3, scale, "255");
  std::vector<uint8_t> doubled(good.size() * 2, 127);
  ASSERT_TRUE(testing::ReplaceHfTensorBytes(w.dir, scale, DType::kF8E8M0,
                                            {shape[0], shape[1] * 2}, doubled)
                  .ok());
  ExpectRefused(w.dir, WeightRole::kW1, 3, scale, "shape");
  // Code pairs of the wrong width.
  std::vector<int64_t> wshape;
  const std::vector<uint8_t> codes =
      TensorBytes(w.dir, weight, &dtype, &wshape);
  ASSERT_EQ(dtype, DType::kI8);
  ASSERT_TRUE(testing::ReplaceHfTensorBytes(
                  w.dir, weight, DType::kI8, {wshape[0], wshape[1] - 1},
                  std::vector<uint8_t>(wshape[0] * (wshape[1] - 1)))
                  .ok());
  ExpectRefused(w.dir, WeightRole::kW1, 3, weight, "shape");
  // The shared expert's per-block E8M0 scale.
  const std::string shared = "layers.1.ffn.shared_experts.w2.scale";
  const std::vector<uint8_t> sgood = TensorBytes(w.dir, shared, &dtype, &shape);
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, shared, DType::kF8E8M0, shape,
                                    std::vector<uint8_t>(sgood.size(), 255))
          .ok());
  ExpectRefused(w.dir, WeightRole::kSharedW2, -1, shared, "255");
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(w.dir, shared, DType::kF32, shape,
                                    std::vector<uint8_t>(sgood.size() * 4))
          .ok());
  ExpectRefused(w.dir, WeightRole::kSharedW2, -1, shared, "dtype");
  fs::remove_all(w.dir);
}

TEST(HfReleased, WriterRefusesWeightsMxfp4CannotHold) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/gptoss_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  c->w1[5] += 1e-3f;  // no longer on the MXFP4 grid
  testing::HfWriteOptions o;
  o.family = HfFamily::kGptOss;
  o.released = true;
  const std::string dir = testing::MakeTempDir("gptoss_inexact_");
  EXPECT_FALSE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe

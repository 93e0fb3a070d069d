// Every golden case through the single-process engine, with fp32 and bf16
// weights: routing ids exact, y within the golden tolerance.
#include "engine/layer_weights.h"
#ifdef MOE_HAVE_CUDA
#include "engine/cuda/cuda_status.h"
#endif
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::GoldenCase;

// Where a golden case runs: the CPU with fp32 or bf16 weights, or a GPU
// (bf16 weights and activations, fp32 accumulation and routing).
enum class Backend { kCpuF32, kCpuBf16, kCuda };

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kCpuF32:
      return "cpu_f32";
    case Backend::kCpuBf16:
      return "cpu_bf16";
    case Backend::kCuda:
      return "cuda";
  }
  return "?";
}

class GoldenEngineTest
    : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

// Runs the case on `backend`; false (after GTEST_SKIP) when it cannot run.
bool RunCase(const GoldenCase& c, Backend backend, std::vector<float>* y,
             Routing* routing) {
  auto source = testing::MakeGoldenSource(c);
  y->assign(c.y.size(), -1.0f);
  if (backend == Backend::kCuda) {
#ifdef MOE_HAVE_CUDA
    auto moe = LocalMoe::Create(*source, "cuda:0", WeightDType::kBF16, 2,
                                std::max<int64_t>(c.tokens, 1));
    EXPECT_TRUE(moe.ok()) << moe.status();
    if (!moe.ok()) return false;
    absl::Status s =
        (*moe)->Forward(0, c.x.data(), c.tokens, {}, y->data(), routing);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
#else
    return false;
#endif
  }
  const WeightDType dtype =
      backend == Backend::kCpuF32 ? WeightDType::kF32 : WeightDType::kBF16;
  auto moe = LocalMoe::Create(*source, "cpu", dtype, 2,
                              std::max<int64_t>(c.tokens, 1));
  EXPECT_TRUE(moe.ok()) << moe.status();
  if (!moe.ok()) return false;
  absl::Status s =
      (*moe)->Forward(0, c.x.data(), c.tokens, {}, y->data(), routing);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok();
}

TEST_P(GoldenEngineTest, MatchesReference) {
  const auto& [path, backend] = GetParam();
  if (backend == Backend::kCuda) {
#ifdef MOE_HAVE_CUDA
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
#else
    GTEST_SKIP() << "this build has no CUDA backend";
#endif
  }
  auto c = testing::LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> y;
  Routing routing;
  ASSERT_TRUE(RunCase(*c, backend, &y, &routing));
  EXPECT_TRUE(AllClose(
      y, c->y,
      backend == Backend::kCpuF32 ? testing::kF32Tol : testing::kBf16Tol));
  if (c->config.routing == RoutingMode::kExpertChoice) {
    EXPECT_TRUE(testing::SameExpertChoice(*c, routing.expert, routing.weight,
                                          routing.tokens, routing.slots));
  } else {
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                          routing.weight, c->tokens,
                                          c->config.top_k, routing.slots));
  }
}

std::string CaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, Backend>>& info) {
  std::string stem = std::get<0>(info.param);
  stem = stem.substr(stem.find_last_of('/') + 1);
  stem = stem.substr(0, stem.find('.'));
  return stem + "_" + BackendName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenEngineTest,
    ::testing::Combine(::testing::ValuesIn(testing::GoldenParams()),
                       ::testing::Values(Backend::kCpuF32, Backend::kCpuBf16,
                                         Backend::kCuda)),
    CaseName);

TEST(GoldenFiles, ArePresent) {
  EXPECT_GE(testing::GoldenFiles().size(), 10u)
      << "golden cases not found in " << testing::GoldenDir()
      << " (set MOE_GOLDEN_DIR)";
}

}  // namespace
}  // namespace moe

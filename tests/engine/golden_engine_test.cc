// Every golden case through the single-process engine, with fp32 and bf16
// weights (and on a GPU FP8 weights too): routing ids exact, y within the
// golden tolerance (FP8: kFp8GpuTol, tests/testutil/compare.h).
#include "engine/layer_weights.h"
#ifdef MOE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/fp8_image.h"
#endif
#include "engine/device_backend.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_gpu_reference.h"
#include "tests/testutil/golden_case.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::GoldenCase;

// Where a golden case runs: the CPU with fp32 or bf16 weights, or a GPU
// (bf16 weights and activations, fp32 accumulation and routing; or FP8
// weights: on sm_90 block-scaled E4M3 weights and activations, held to
// kFp8GpuTol and to the host emulation of those numerics, elsewhere
// dequantised to bf16 at load, held to kFp8GpuTol).
enum class Backend { kCpuF32, kCpuBf16, kCuda, kCudaFp8 };

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kCpuF32:
      return "cpu_f32";
    case Backend::kCpuBf16:
      return "cpu_bf16";
    case Backend::kCuda:
      return "cuda";
    case Backend::kCudaFp8:
      return "cuda_fp8";
  }
  return "?";
}

class GoldenEngineTest
    : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

#ifdef MOE_HAVE_CUDA
// Whether cuda:0 runs the case's FP8 experts block-scaled (sm_90), as
// engine/cuda/cuda_backend.cc decides.
bool CudaFp8BlockScaled(const GoldenCase& c) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return false;
  return ChooseFp8GpuPath(p.major, p.minor, c.config.hidden,
                          c.config.num_experts)
             .path == Fp8GpuPath::kBlockScaled;
}
#endif

// Runs the case on `backend`; false (after GTEST_SKIP) when it cannot run.
bool RunCase(const GoldenCase& c, Backend backend, std::vector<float>* y,
             Routing* routing) {
  auto source = testing::MakeGoldenSource(c);
  y->assign(c.y.size(), -1.0f);
  if (backend == Backend::kCuda || backend == Backend::kCudaFp8) {
#ifdef MOE_HAVE_CUDA
    auto moe = LocalMoe::Create(
        *source, "cuda:0",
        backend == Backend::kCuda ? WeightDType::kBF16 : WeightDType::kFP8, 2,
        std::max<int64_t>(c.tokens, 1));
    EXPECT_TRUE(moe.ok()) << moe.status();
    if (!moe.ok()) return false;
    absl::Status s = (*moe)->Forward(0, c.x.data(),
                                     {.n = c.tokens, .token_ids = c.token_ids},
                                     y->data(), routing);
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
      (*moe)->Forward(0, c.x.data(), {.n = c.tokens, .token_ids = c.token_ids},
                      y->data(), routing);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok();
}

TEST_P(GoldenEngineTest, MatchesReference) {
  const auto& [path, backend] = GetParam();
  if (backend == Backend::kCuda || backend == Backend::kCudaFp8) {
#ifdef MOE_HAVE_CUDA
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
#else
    GTEST_SKIP() << "this build has no CUDA backend";
#endif
  }
  auto c = testing::LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status();
  const bool cuda = backend == Backend::kCuda || backend == Backend::kCudaFp8;
  if (absl::Status s = CheckDeviceLayerMath(c->config, "the CUDA backend");
      cuda && !s.ok()) {
    // The 2026b layer math is not on the GPU yet: what the backend must do
    // is refuse it at load, saying so, and that is what is checked.
    auto source = testing::MakeGoldenSource(*c);
    auto moe = LocalMoe::Create(*source, "cuda:0", WeightDType::kBF16, 2,
                                std::max<int64_t>(c->tokens, 1));
    EXPECT_EQ(moe.status().code(), absl::StatusCode::kUnimplemented)
        << moe.status();
    GTEST_SKIP() << c->name << ": refused at load as expected: " << s.message();
  }
  std::vector<float> y;
  Routing routing;
  ASSERT_TRUE(RunCase(*c, backend, &y, &routing));
  if (backend == Backend::kCudaFp8) {
    EXPECT_TRUE(testing::RmsClose(y, c->y, testing::kFp8GpuTol));
#ifdef MOE_HAVE_CUDA
    if (CudaFp8BlockScaled(*c)) {
      auto emulated = testing::EmulateCudaFp8Layer(*c);
      ASSERT_TRUE(emulated.ok()) << emulated.status();
      EXPECT_TRUE(testing::RmsClose(y, *emulated, testing::kFp8EmulationTol));
    }
#endif
  } else if (backend == Backend::kCuda) {
    // bf16 activations too: kBf16Tol where their rounding allows it.
    EXPECT_TRUE(testing::CudaBf16Close(*c, y));
  } else {
    EXPECT_TRUE(AllClose(
        y, c->y,
        backend == Backend::kCpuF32 ? testing::kF32Tol : testing::kBf16Tol));
  }
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
                                         Backend::kCuda, Backend::kCudaFp8)),
    CaseName);

TEST(GoldenFiles, ArePresent) {
  EXPECT_GE(testing::GoldenFiles().size(), 10u)
      << "golden cases not found in " << testing::GoldenDir()
      << " (set MOE_GOLDEN_DIR)";
}

}  // namespace
}  // namespace moe

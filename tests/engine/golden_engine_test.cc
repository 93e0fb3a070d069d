// Every golden case through the single-process engine, with fp32 and bf16
// weights (and on a GPU FP8 weights too): routing ids exact, y within the
// golden tolerance (FP8: kFp8GpuTol, tests/testutil/compare.h).
#include "engine/layer_weights.h"
#ifdef MOE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/fp8_image.h"
#endif
#include "comm/loopback_communicator.h"
#include "core/status_macros.h"
#include "engine/device_backend.h"
#include "engine/ep_step.h"
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

#ifdef MOE_HAVE_CUDA
// Runs the case as a CPU router with a CUDA worker serves it, in one
// process: the router part on the CPU (routing, the experts' frame, the
// shared expert), the routed experts on cuda:0 (a backend loaded as a
// worker loads it: no gate, no shared expert) through THE step at world
// size 1. This is how a model whose router part the GPU does not compute
// yet is served (tests/integration/distributed_golden_test.cc runs it
// across processes), and how Gemma 4 was before a CUDA router computed
// its router part on the host.
absl::Status RunOnCudaWorker(const GoldenCase& c, WeightDType dtype,
                             std::vector<float>* y, Routing* routing) {
  const MoeLayerConfig& cfg = c.config;
  const int64_t n = c.tokens, T = std::max<int64_t>(n, 1), layer = 0;
  auto source = testing::MakeGoldenSource(c);
  MOE_ASSIGN_OR_RETURN(
      std::unique_ptr<LocalMoe> router,
      LocalMoe::Create(*source, "cpu", WeightDType::kBF16, 2, T));
  ExpertBackend& cpu = router->backend();
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> worker,
                       CreateExpertBackend("cuda:0", 1));
  LoadOptions o;
  o.dtype = dtype;
  o.load_gate = false;
  o.load_shared = false;
  MOE_RETURN_IF_ERROR(worker->Load(*source, o, T));
  const int64_t ends[] = {n};
  MOE_RETURN_IF_ERROR(cpu.RouteTokens(
      layer, c.x.data(),
      {.n = n, .segment_ends = ends, .token_ids = c.token_ids}, routing));
  MOE_ASSIGN_OR_RETURN(const float* rows,
                       cpu.EnterExperts(layer, c.x.data(), n));
  std::vector<int32_t> expert_ids;
  std::vector<int64_t> counts;
  PlanDispatch(*routing, n, /*world=*/1, cfg.num_experts, &expert_ids, &counts);
  EpStepInput in;
  in.layer = layer;
  in.tokens = n;
  in.rows = rows;
  in.slots = routing->slots;
  in.expert_ids = expert_ids;
  in.weights = routing->weight;
  in.counts = counts;
  std::vector<float> routed(n * cfg.expert_width());
  EpStep step;
  std::unique_ptr<Communicator> loopback = CreateLoopbackCommunicator();
  MOE_RETURN_IF_ERROR(step.Run(in, *worker, *loopback,
                               {.max_count = n, .x_resident = false},
                               routed.data(), nullptr));
  y->assign(n * cfg.hidden, 0.0f);
  if (cfg.has_expert_frame()) {
    MOE_RETURN_IF_ERROR(cpu.LeaveExperts(layer, routed.data(), n, y->data()));
  } else {
    *y = routed;
  }
  if (cfg.has_shared() && n > 0) {
    std::vector<float> shared(n * cfg.hidden);
    MOE_RETURN_IF_ERROR(cpu.Shared(layer, c.x.data(), n, shared.data()));
    for (size_t i = 0; i < shared.size(); ++i) (*y)[i] += shared[i];
  }
  return absl::OkStatus();
}
#endif

// A case whose router part the GPU refuses (CheckDeviceRouterMath): the
// CUDA backend's router part must refuse it at load, saying where to route
// it; then the case runs as a CPU router
// with a CUDA worker serves it. False when either fails.
bool RunOnCpuRouterAndCudaWorker(const GoldenCase& c, Backend backend,
                                 std::vector<float>* y, Routing* routing) {
#ifdef MOE_HAVE_CUDA
  auto source = testing::MakeGoldenSource(c);
  auto moe = LocalMoe::Create(*source, "cuda:0", WeightDType::kBF16, 2,
                              std::max<int64_t>(c.tokens, 1));
  EXPECT_EQ(moe.status().code(), absl::StatusCode::kUnimplemented)
      << moe.status();
  EXPECT_NE(moe.status().message().find("CPU router"), std::string::npos)
      << moe.status();
  const absl::Status s = RunOnCudaWorker(
      c, backend == Backend::kCuda ? WeightDType::kBF16 : WeightDType::kFP8, y,
      routing);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() && moe.status().code() == absl::StatusCode::kUnimplemented;
#else
  return false;
#endif
}

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
  std::vector<float> y;
  Routing routing;
  // The single-process engine loads the router part too; where the GPU
  // refuses its math, the case's experts run on a CUDA worker behind a CPU
  // router instead. Gemma 4 runs on the CUDA router (its routing and norms
  // on the host, DeviceBackend).
  const bool on_worker =
      cuda && !CheckDeviceLayerMath(c->config, "the CUDA backend",
                                    /*router_part=*/true)
                   .ok();
  ASSERT_TRUE(on_worker ? RunOnCpuRouterAndCudaWorker(*c, backend, &y, &routing)
                        : RunCase(*c, backend, &y, &routing));
  // The host emulations of the GPU's numerics (tests/testutil/
  // fp8_gpu_reference.h) have no expert frames and no non-gated experts:
  // such cases are held to the GPU's bounds against the reference.
  const bool emulated = c->config.gated && !c->config.has_expert_frame();
  if (cuda && !emulated) {
    EXPECT_TRUE(testing::RmsClose(y, c->y,
                                  backend == Backend::kCuda
                                      ? testing::kBf16GpuTol
                                      : testing::kFp8GpuTol));
  } else if (backend == Backend::kCudaFp8) {
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
  } else if (backend == Backend::kCpuBf16) {
    EXPECT_TRUE(testing::CpuBf16Close(*c, y));
  } else {
    EXPECT_TRUE(AllClose(y, c->y, testing::kF32Tol));
  }
  if (c->config.routing == RoutingMode::kExpertChoice) {
    EXPECT_TRUE(testing::SameExpertChoice(*c, routing.expert, routing.weight,
                                          routing.tokens, routing.slots));
  } else {
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                          routing.weight, c->tokens,
                                          c->config.top_k, routing.slots));
  }
#ifdef MOE_HAVE_CUDA
  // A layer the CUDA router routes on the host (Gemma 4) also the way it
  // was served before, as a CPU router with a CUDA worker: the same
  // routing (the CPU's TokenRouter both ways) and the GPU's bound.
  if (cuda && !on_worker && RoutesOnHost(c->config)) {
    std::vector<float> y_worker;
    Routing on_cpu_router;
    const absl::Status s = RunOnCudaWorker(
        *c, backend == Backend::kCuda ? WeightDType::kBF16 : WeightDType::kFP8,
        &y_worker, &on_cpu_router);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(on_cpu_router.expert, routing.expert);
    EXPECT_TRUE(testing::RmsClose(y_worker, c->y,
                                  backend == Backend::kCuda
                                      ? testing::kBf16GpuTol
                                      : testing::kFp8GpuTol));
  }
#endif
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

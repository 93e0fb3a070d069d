// The single-GPU layer (LocalMoe on the CUDA backend) against the independent
// reference: odd sizes, every routing option, and no device allocation per
// step. The golden cases run in golden_engine_test's cuda instantiation. Skips,
// with the reason, when no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>

#include "core/dtype.h"
#include "core/hf_checkpoint.h"
#include "engine/caller_overrides.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/fp8_image.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/row_bucket.h"
#include "engine/device_load.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/bf16_forward_check.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/mxfp4_case.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
  }
};

MoeLayerConfig Base() {
  MoeLayerConfig c;
  c.hidden = 72;  // multiples of 8: cuBLASLt's bf16 alignment
  c.inter = 40;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

void ExpectMatches(const MoeLayerConfig& config, int64_t n, uint64_t seed) {
  auto g = testing::RandomCase(config, n, seed);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 256);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(n * config.hidden);
  Routing r;
  ASSERT_TRUE((*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r).ok());
  EXPECT_TRUE(testing::AllClose(y, g.y, testing::kBf16Tol));
  if (config.routing == RoutingMode::kTokenChoice) {
    EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, r.expert,
                                          r.weight, n, config.top_k, r.slots));
  }
}

TEST_F(CudaEngineTest, OddSizes) {
  for (int64_t n : {0, 1, 37, 200}) ExpectMatches(Base(), n, 10 + n);
}

TEST_F(CudaEngineTest, EveryRoutingOption) {
  MoeLayerConfig c = Base();
  c.num_experts = 16;
  c.top_k = 4;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.n_groups = 4;
  c.topk_groups = 2;
  c.route_scale = 2.5f;
  c.shared_inter = 48;
  ExpectMatches(c, 29, 1);
  MoeLayerConfig q = Base();
  q.shared_inter = 32;
  q.shared_gate = true;
  q.route_norm = false;
  ExpectMatches(q, 17, 2);
  MoeLayerConfig s = Base();
  s.score_before_experts = true;
  s.capacity_factor = 0.75;
  ExpectMatches(s, 40, 3);
  MoeLayerConfig e = Base();
  e.routing = RoutingMode::kExpertChoice;
  ExpectMatches(e, 24, 4);
}

TEST_F(CudaEngineTest, StepsAllocateNothing) {
  const MoeLayerConfig c = Base();
  auto g = testing::RandomCase(c, 64, 5);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 128);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(64 * c.hidden);
  Routing r;
  // The first step too: a backend holding experts makes its step buffers
  // at load, so no step allocates device memory.
  const int64_t before = DeviceAllocationCount();
  for (int64_t n : {64, 64, 7, 1, 64}) {
    ASSERT_TRUE((*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r).ok());
  }
  EXPECT_EQ(DeviceAllocationCount(), before);
}

// A bf16 request goes up as bf16 and is widened on the device: the same
// fp32 rows as the host's widening, so the same bits.
TEST_F(CudaEngineTest, ABf16RequestGivesItsWidenedRowsBits) {
  MoeLayerConfig c = Base();
  c.shared_inter = 24;
  c.shared_gate = true;
  testing::ExpectBf16ForwardGivesWidenedRowsBits(
      c, /*n=*/37, /*seed=*/9, "cuda:0", WeightDType::kBF16, 64);
}

// Many steps in a row, each OK: no error left over by one step (or by an
// unrelated runtime call, here a failed cudaSetDevice every 10th step) may
// fail a later one's kernel launch.
TEST_F(CudaEngineTest, FiveHundredStepsInARowAllSucceed) {
  MoeLayerConfig c = Base();
  c.shared_inter = 24;
  auto g = testing::RandomCase(c, 37, 21);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 64);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(37 * c.hidden), first;
  Routing r;
  for (int step = 0; step < 500; ++step) {
    if (step % 10 == 9) {
      ASSERT_NE(cudaSetDevice(CudaDeviceCount() + 3), cudaSuccess);
    }
    const int64_t n = 1 + (step * 7) % 37;  // odd sizes, 1..37
    const absl::Status s =
        (*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    if (n == 37 && first.empty()) {
      first = y;
      EXPECT_TRUE(testing::AllClose(y, g.y, testing::kBf16Tol));
    } else if (n == 37) {
      EXPECT_EQ(y, first) << "step " << step;
    }
  }
  (void)cudaGetLastError();
}

// Expert choice per request: seven requests of odd lengths in one batch
// route and compute exactly as the CPU engine does with the same weights
// (bf16 on both), within bf16 tolerance, with the same expert ids.
TEST_F(CudaEngineTest, ExpertChoiceOfSevenOddRequestsMatchesTheCpuEngine) {
  MoeLayerConfig c = Base();
  c.routing = RoutingMode::kExpertChoice;
  c.num_experts = 6;
  c.shared_inter = 16;
  const std::vector<int64_t> lengths = {1, 3, 5, 9, 13, 7, 19};
  std::vector<int64_t> ends;
  int64_t n = 0;
  for (int64_t len : lengths) ends.push_back(n += len);
  auto g = testing::RandomCase(c, n, 31);
  auto src = testing::MakeGoldenSource(g);
  auto gpu = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 64);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = LocalMoe::Create(*src, "cpu", WeightDType::kBF16, 2, 64);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<float> y_gpu(n * c.hidden), y_cpu(n * c.hidden);
  Routing r_gpu, r_cpu;
  ASSERT_TRUE((*gpu)
                  ->Forward(0, g.x.data(), {.n = n, .segment_ends = ends},
                            y_gpu.data(), &r_gpu)
                  .ok());
  ASSERT_TRUE((*cpu)
                  ->Forward(0, g.x.data(), {.n = n, .segment_ends = ends},
                            y_cpu.data(), &r_cpu)
                  .ok());
  EXPECT_TRUE(testing::AllClose(y_gpu, y_cpu, testing::kBf16Tol));
  ASSERT_EQ(r_gpu.slots, r_cpu.slots);
  EXPECT_EQ(r_gpu.expert, r_cpu.expert);
  ASSERT_EQ(r_gpu.weight.size(), r_cpu.weight.size());
  for (size_t i = 0; i < r_cpu.weight.size(); ++i) {
    EXPECT_NEAR(r_gpu.weight[i], r_cpu.weight[i],
                1e-5 + 1e-4 * std::fabs(r_cpu.weight[i]))
        << "slot " << i;
  }
  // Per request, not per step: each request alone gives the same rows.
  int64_t begin = 0;
  for (int64_t end : ends) {
    const int64_t len = end - begin;
    std::vector<float> y_one(len * c.hidden);
    Routing r_one;
    ASSERT_TRUE((*gpu)
                    ->Forward(0, g.x.data() + begin * c.hidden, {.n = len},
                              y_one.data(), &r_one)
                    .ok());
    EXPECT_TRUE(
        testing::AllClose(y_one,
                          std::vector<float>(y_cpu.begin() + begin * c.hidden,
                                             y_cpu.begin() + end * c.hidden),
                          testing::kBf16Tol))
        << "request [" << begin << ", " << end << ")";
    begin = end;
  }
}

// cuBLASLt plans per row bucket: Warm builds one plan per bucket, after
// which every row count 1..max_rows runs (the bucket's plan with the call's
// own row count in its layouts) without another heuristic query, and gives
// the right product; the cache stays within kMaxPlans.
TEST_F(CudaEngineTest, LtMatmulPlansPerRowBucket) {
  auto lt = LtMatmul::Create();
  ASSERT_TRUE(lt.ok()) << lt.status();
  const int64_t max_rows = 100, n = 48, k = 72;
  const LtShape shape{max_rows, n, k, CUDA_R_16BF, CUDA_R_32F};
  ASSERT_TRUE((*lt)->Warm({&shape, 1}).ok());
  EXPECT_EQ((*lt)->cached_plans(), RowBuckets(max_rows).size());
  const int64_t queries = (*lt)->heuristic_queries();
  std::vector<uint16_t> x(max_rows * k), w(n * k);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = F32ToBf16(static_cast<float>((i * 37) % 17) / 8.0f - 1.0f);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = F32ToBf16(static_cast<float>((i * 11) % 13) / 6.0f - 1.0f);
  }
  auto dx = *DeviceBuffer::Allocate(x.size() * 2);
  auto dw = *DeviceBuffer::Allocate(w.size() * 2);
  auto dd = *DeviceBuffer::Allocate(max_rows * n * 4);
  ASSERT_EQ(
      cudaMemcpy(dx.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(dw.data(), w.data(), w.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  std::vector<float> d(max_rows * n);
  for (int64_t m = 1; m <= max_rows; ++m) {
    ASSERT_EQ(cudaMemset(dd.data(), 0xff, max_rows * n * 4), cudaSuccess);
    ASSERT_TRUE((*lt)
                    ->Run(m, n, k, dx.data(), dw.data(), dd.data(), CUDA_R_16BF,
                          CUDA_R_32F, nullptr)
                    .ok());
    ASSERT_EQ(
        cudaMemcpy(d.data(), dd.data(), d.size() * 4, cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += Bf16ToF32(x[r * k + i]) * Bf16ToF32(w[c * k + i]);
        }
        ASSERT_NEAR(d[r * n + c], want, 1e-3 * (1 + std::fabs(want)))
            << "m " << m << " row " << r << " col " << c;
      }
    }
    // Rows past m are not written (the layouts carry m, not the bucket).
    if (m < max_rows) {
      EXPECT_TRUE(std::isnan(d[m * n])) << "m " << m;
    }
  }
  EXPECT_EQ((*lt)->heuristic_queries(), queries);
  EXPECT_EQ((*lt)->cached_plans(), RowBuckets(max_rows).size());
  // Bounded: more shapes than the cache holds evict the oldest plans.
  auto big_w = *DeviceBuffer::Allocate(512 * 72 * 2);
  ASSERT_EQ(cudaMemset(big_w.data(), 0, big_w.size()), cudaSuccess);
  for (int64_t i = 0; i < static_cast<int64_t>(LtMatmul::kMaxPlans) + 8; ++i) {
    ASSERT_TRUE((*lt)
                    ->Run(1, 8 + 8 * (i % 64), 8 + 8 * (i / 64), dx.data(),
                          big_w.data(), dd.data(), CUDA_R_16BF, CUDA_R_32F,
                          nullptr)
                    .ok());
  }
  EXPECT_LE((*lt)->cached_plans(), LtMatmul::kMaxPlans);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Caller routing on a layer the CUDA router routes on the device: one
// request routed by the gate, one by the caller's logits (scored on the
// host, the logits kept for the answer), one by the caller's ids and
// weights and skipping the shared expert, against the CPU engine with the
// same weights and requests.
class CudaRouterCallerTest : public CudaEngineTest {};

TEST_F(CudaRouterCallerTest, CallerLogitsAndExpertsMatchTheCpuEngine) {
  MoeLayerConfig c = Base();
  c.num_experts = 16;
  c.top_k = 4;
  c.shared_inter = 32;
  c.shared_gate = true;
  const int64_t n = 24, E = c.num_experts, k = c.top_k, H = c.hidden;
  const int64_t ends[] = {8, 16, n};
  auto g = testing::RandomCase(c, n, 41);
  auto src = testing::MakeGoldenSource(g);
  auto gpu = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 64);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = LocalMoe::Create(*src, "cpu", WeightDType::kBF16, 2, 64);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const RouteSource route[] = {RouteSource::kGate, RouteSource::kLogits,
                               RouteSource::kRouting};
  const SharedPart shared[] = {SharedPart::kAdd, SharedPart::kAdd,
                               SharedPart::kSkip};
  std::vector<float> logits(n * E, 0.0f), weight(n * k);
  std::vector<int32_t> expert(n * k);
  for (int64_t t = 8; t < 16; ++t) {
    for (int64_t e = 0; e < E; ++e) logits[t * E + e] = ((t * 7 + e * 5) % E);
  }
  for (int64_t t = 16; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      expert[t * k + j] = static_cast<int32_t>((t + 3 * j) % E);
      weight[t * k + j] = 0.1f * (j + 1);
    }
  }
  CallerOverrides caller;
  caller.route = route;
  caller.shared = shared;
  caller.logits = logits.data();
  caller.expert = expert.data();
  caller.weight = weight.data();
  caller.keep_logits = true;
  const RouteRows rows{.n = n, .segment_ends = ends, .caller = &caller};
  std::vector<float> y_gpu(n * H), y_cpu(n * H);
  Routing r_gpu, r_cpu;
  for (int rep = 0; rep < 2; ++rep) {  // the second on warm buffers
    ASSERT_TRUE(
        (*gpu)->Forward(0, g.x.data(), rows, y_gpu.data(), &r_gpu).ok());
  }
  ASSERT_TRUE((*cpu)->Forward(0, g.x.data(), rows, y_cpu.data(), &r_cpu).ok());
  EXPECT_TRUE(testing::RmsClose(y_gpu, y_cpu, testing::kBf16GpuTol));
  ASSERT_EQ(r_gpu.expert.size(), r_cpu.expert.size());
  // The caller's rows exactly; the gate's within its ties.
  for (int64_t t = 8; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(r_gpu.expert[t * k + j], r_cpu.expert[t * k + j]) << t;
      EXPECT_NEAR(r_gpu.weight[t * k + j], r_cpu.weight[t * k + j], 1e-5) << t;
    }
  }
  EXPECT_TRUE(testing::SameTokenRouting(
      std::vector<int64_t>(r_cpu.expert.begin(), r_cpu.expert.begin() + 8 * k),
      std::vector<float>(r_cpu.weight.begin(), r_cpu.weight.begin() + 8 * k),
      std::vector<int32_t>(r_gpu.expert.begin(), r_gpu.expert.begin() + 8 * k),
      std::vector<float>(r_gpu.weight.begin(), r_gpu.weight.begin() + 8 * k), 8,
      k, k));
  // The kept logits: the device's gate for the gate's rows, the caller's
  // own for theirs.
  ASSERT_EQ(r_gpu.logits.size(), static_cast<size_t>(n * E));
  ASSERT_EQ(r_cpu.logits.size(), static_cast<size_t>(n * E));
  for (int64_t i = 0; i < 8 * E; ++i) {
    EXPECT_NEAR(r_gpu.logits[i], r_cpu.logits[i],
                1e-3 * (1 + std::fabs(r_cpu.logits[i])));
  }
  for (int64_t i = 8 * E; i < 16 * E; ++i) {
    EXPECT_EQ(r_gpu.logits[i], logits[i]) << i;
  }
}

// A worker of 384 experts (past the 256 at which FP8 experts are
// dequantised to bf16 at load on sm_90, engine/cuda/fp8_image.h) running a
// step whose rows spread over hundreds of experts, so that the grouped GEMM
// runs hundreds of groups: bf16 and FP8 against the reference.
class CudaManyExpertsTest : public CudaEngineTest {};

TEST_F(CudaManyExpertsTest, A384ExpertLayerMatchesTheReferenceInBf16AndFp8) {
  MoeLayerConfig c = Base();
  c.num_experts = 384;
  c.top_k = 8;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.route_norm = true;
  const int64_t n = 160;
  EXPECT_EQ(ChooseFp8GpuPath(9, 0, c.hidden, c.num_experts).path,
            Fp8GpuPath::kDequantBf16)
      << "384 experts kept as E4M3: the fallback above 256 is not tested";
  auto g = testing::RandomCase(c, n, 384);
  auto src = testing::MakeGoldenSource(g);
  for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kFP8}) {
    SCOPED_TRACE(WeightDTypeName(dtype));
    auto moe = LocalMoe::Create(*src, "cuda:0", dtype, 1, n);
    ASSERT_TRUE(moe.ok()) << moe.status();
    std::vector<float> y(n * c.hidden);
    Routing r;
    ASSERT_TRUE((*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r).ok());
    int64_t active = 0;
    for (int64_t e = 0; e < c.num_experts; ++e)
      active += r.expert_counts[e] > 0;
    EXPECT_GE(active, 256) << "the step's rows reach too few experts";
    EXPECT_TRUE(testing::RmsClose(y, g.y,
                                  dtype == WeightDType::kFP8
                                      ? testing::kFp8GpuTol
                                      : testing::kBf16GpuTol));
    EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, r.expert,
                                          r.weight, n, c.top_k, r.slots));
  }
}

// Load is all-or-nothing on the GPU: a reload that fails at each of its
// points (engine/device_load.h) leaves the old model serving with the same
// bits; a whole one serves the new model. And a load beside a graph capture
// on another backend's stream (Stage while steps run) leaves that capture
// intact: the load waits for its own stream only.
class CudaLoadTest : public CudaEngineTest {};

TEST_F(CudaLoadTest, AReloadFailingAtAnyPointLeavesTheOldModelServing) {
  MoeLayerConfig a = Base(), b = Base();
  a.shared_inter = 32;
  b.hidden = 96;
  b.num_experts = 12;
  const int64_t n = 20;
  auto ga = testing::RandomCase(a, n, 5), gb = testing::RandomCase(b, n, 6);
  auto sa = testing::MakeGoldenSource(ga), sb = testing::MakeGoldenSource(gb);
  auto backend = CreateExpertBackend("cuda:0", 1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  LoadOptions o;
  o.dtype = WeightDType::kBF16;
  ASSERT_TRUE((*backend)->Load(*sa, o, 64).ok());
  LocalMoe moe(backend->get());
  auto forward = [&](const testing::GoldenCase& g) {
    std::vector<float> y(n * g.config.hidden);
    Routing r;
    const absl::Status s = moe.Forward(0, g.x.data(), {.n = n}, y.data(), &r);
    EXPECT_TRUE(s.ok()) << s;
    return y;
  };
  const std::vector<float> before = forward(ga);
  EXPECT_TRUE(testing::AllClose(before, ga.y, testing::kBf16Tol));
  for (LoadPoint p : kLoadPoints) {
    SCOPED_TRACE(LoadPointName(p));
    SetLoadFaultForTest([p](LoadPoint at) {
      return at == p ? absl::ResourceExhaustedError("injected")
                     : absl::OkStatus();
    });
    const absl::Status s = (*backend)->Load(*sb, o, 64);
    SetLoadFaultForTest(nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_EQ((*backend)->config().hidden, a.hidden);
    EXPECT_EQ(forward(ga), before) << "the old model changed";
  }
  ASSERT_TRUE((*backend)->Load(*sb, o, 64).ok());
  EXPECT_TRUE(testing::AllClose(forward(gb), gb.y, testing::kBf16Tol));
}

TEST_F(CudaLoadTest, ALoadBesideAGraphCaptureLeavesTheCaptureIntact) {
  MoeLayerConfig c = Base();
  c.shared_inter = 32;
  auto g = testing::RandomCase(c, 16, 9);
  auto src = testing::MakeGoldenSource(g);
  auto buffer = DeviceBuffer::Allocate(1 << 20);
  ASSERT_TRUE(buffer.ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  std::atomic<bool> capturing{false}, loaded{false};
  cudaError_t end = cudaErrorUnknown;
  cudaGraph_t graph = nullptr;
  // The serving backend's thread, capturing as its graph cache does.
  std::thread serving([&] {
    cudaSetDevice(0);
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) !=
        cudaSuccess) {
      capturing = true;
      return;
    }
    cudaMemsetAsync(buffer->data(), 0, buffer->size(), stream);
    capturing = true;
    while (!loaded) std::this_thread::yield();
    cudaMemsetAsync(buffer->data(), 1, buffer->size(), stream);
    end = cudaStreamEndCapture(stream, &graph);
  });
  while (!capturing) std::this_thread::yield();
  absl::Status s;
  for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kFP8}) {
    auto staged = LocalMoe::Create(*src, "cuda:0", dtype, 1, 16);
    if (!staged.ok()) s = staged.status();
  }
  loaded = true;
  serving.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(end, cudaSuccess)
      << cudaGetErrorString(end) << ": the load broke the capture";
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The golden cases released in 4-bit formats, loaded from 4-bit files on
// the GPU (MXFP4 and NVFP4 experts go up as their bf16 values) against the
// CPU engine loading the same files at the same dtype: Kimi K3 and gpt-oss
// as released in MXFP4, Nemotron 3 as NVIDIA ModelOpt's NVFP4 export.
struct FourBitCase {
  std::string name;
  HfFamily family;
  WeightDType dtype;
};

class CudaGolden4BitTest : public ::testing::TestWithParam<FourBitCase> {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
  }
};

TEST_P(CudaGolden4BitTest, MatchesTheCpuAtTheSameDtype) {
  const FourBitCase& p = GetParam();
  auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + p.name +
                                   ".safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  // The MXFP4 writers want weights that are exactly MXFP4.
  if (p.dtype == WeightDType::kMXFP4) {
    testing::RoundTripRoutedExpertsThroughMxfp4(&*c);
  }
  const std::string dir = testing::MakeTempDir(p.name + "_4bit_");
  testing::HfWriteOptions o;
  o.family = p.family;
  o.released = p.dtype == WeightDType::kMXFP4;
  o.nvfp4_experts = p.dtype == WeightDType::kNVFP4;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ(*ResolveWeightDType(WeightDType::kAuto, **ckpt), p.dtype)
      << "the file is not " << WeightDTypeName(p.dtype);
  const int64_t layer = (*ckpt)->info().moe_layers.front();
  const int64_t n = c->tokens, H = c->config.hidden;
  auto gpu = LocalMoe::Create(**ckpt, "cuda:0", p.dtype, 1, n, layer);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = LocalMoe::Create(**ckpt, "cpu", p.dtype, 2, n, layer);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const int64_t ends[] = {n};
  const RouteRows rows{.n = n, .segment_ends = ends, .token_ids = c->token_ids};
  std::vector<float> y_gpu(n * H), y_cpu(n * H);
  Routing r_gpu, r_cpu;
  ASSERT_TRUE(
      (*gpu)->Forward(layer, c->x.data(), rows, y_gpu.data(), &r_gpu).ok());
  ASSERT_TRUE(
      (*cpu)->Forward(layer, c->x.data(), rows, y_cpu.data(), &r_cpu).ok());
  EXPECT_TRUE(testing::RmsClose(y_gpu, y_cpu, testing::kBf16GpuTol));
  EXPECT_TRUE(testing::SameTokenRouting(
      std::vector<int64_t>(r_cpu.expert.begin(), r_cpu.expert.end()),
      r_cpu.weight, r_gpu.expert, r_gpu.weight, n, c->config.top_k,
      r_gpu.slots));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Golden4Bit, CudaGolden4BitTest,
    ::testing::Values(
        FourBitCase{"kimi_k3_like", HfFamily::kKimiK3, WeightDType::kMXFP4},
        FourBitCase{"gptoss_like", HfFamily::kGptOss, WeightDType::kMXFP4},
        FourBitCase{"nemotron3_nvfp4", HfFamily::kNemotronH,
                    WeightDType::kNVFP4}),
    [](const auto& info) {
      return info.param.name + (info.param.dtype == WeightDType::kMXFP4
                                    ? "_cuda_mxfp4"
                                    : "_cuda_nvfp4");
    });

}  // namespace
}  // namespace moe

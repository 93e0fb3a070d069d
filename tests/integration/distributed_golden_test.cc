// Every golden case, written as a Hugging Face checkpoint, served by a real
// router with P = 0 (in-process), 1, 2 and 3 CPU workers on loopback:
// routing ids exact, y within the golden tolerance.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#ifdef MOE_HAVE_CUDA
#include "engine/cuda/cuda_status.h"
#endif
#include "engine/device_backend.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_gpu_reference.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/many_experts.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// (workers P, device): CPU router and workers, or a GPU each (bf16; or
// cuda_fp8: FP8 weights, held to kFp8GpuTol, tests/testutil/compare.h).
class DistributedGoldenTest
    : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DistributedGoldenTest, EveryCaseMatches) {
  const auto& [workers, kind] = GetParam();
  const bool fp8 = kind == "cuda_fp8";
  const std::string device = fp8 ? "cuda" : kind;
  if (device == "cuda") {
#ifdef MOE_HAVE_CUDA
    // One GPU is enough: workers that share it exchange through pinned
    // host memory (Gloo) instead of NCCL, which wants one rank per GPU.
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
      GTEST_SKIP() << s.message();
    }
#else
    GTEST_SKIP() << "this build has no CUDA backend";
#endif
  }
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    const bool cuda = device == "cuda";
    if (absl::Status s = CheckDeviceLayerMath(c->config, "the CUDA backend",
                                              /*router_part=*/false);
        cuda && !s.ok()) {
      // Refused at load by every CUDA worker: nothing to serve here.
      std::printf("%s: not served on the GPU: %s\n", c->name.c_str(),
                  std::string(s.message()).c_str());
      continue;
    }
    // What the GPU's router part does not compute yet is routed on a CPU
    // router, whose CUDA workers run the experts; at P = 0 the router serves
    // alone. A layer the GPU router routes on the host (Gemma 4) runs at
    // P = 1 both ways: on a GPU router, and on a CPU router as it was served
    // before.
    const absl::Status router_math = CheckDeviceLayerMath(
        c->config, "the CUDA backend", /*router_part=*/true);
    if (cuda && !router_math.ok() && workers == 0) {
      std::printf("%s: not served by a GPU router: %s\n", c->name.c_str(),
                  std::string(router_math.message()).c_str());
      continue;
    }
    std::vector<bool> cpu_routers = {cuda && !router_math.ok()};
    if (cuda && !fp8 && router_math.ok() && workers == 1 &&
        RoutesOnHost(c->config)) {
      cpu_routers.push_back(true);
    }
    for (const bool cpu_router : cpu_routers) {
      const testing::HfWriteOptions o;  // the case at its default layer
      auto written = testing::WriteCaseCheckpoint(*c, c->name + "_ckpt_", o);
      ASSERT_TRUE(written.ok()) << written.status();
      const std::string& dir = *written;

      testing::LocalCluster cluster;
      testing::LocalCluster::Options co;
      co.model_args = {"--model=" + dir};
      // After LocalCluster's own --weight-dtype=bf16: the last one counts.
      if (fp8) co.model_args.push_back("--weight-dtype=fp8");
      co.workers = workers;
      co.device = device;
#ifdef MOE_HAVE_CUDA
      if (cuda) co.gpus = CudaDeviceCount();
#endif
      if (cpu_router) {
        // The router on the CPU with the weights a GPU router would keep
        // (before the FP8 flag above, which then counts), every worker on
        // cuda:0, exchanging as LocalCluster's GPU workers on one GPU do.
        co.device = "cpu";
        co.model_args.insert(co.model_args.begin() + 1, "--weight-dtype=bf16");
        co.worker_args = {"--device=cuda:0", workers > 1 ? "--collective=gloo"
                                                         : "--collective=nccl"};
        std::printf("%s: a CPU router with %d CUDA workers (%s)\n",
                    c->name.c_str(), workers,
                    router_math.ok()
                        ? "also served by a GPU router, above"
                        : std::string(router_math.message()).c_str());
      }
      ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
      ForwardOptions fo;
      fo.token_ids = c->token_ids;
      fo.routing = true;
      auto r =
          cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                   c->tokens, c->config.hidden, fo);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
      if (fp8) {
        EXPECT_TRUE(testing::RmsClose(r->y, c->y, testing::kFp8GpuTol));
      } else if (cuda && (!c->config.gated || c->config.has_expert_frame())) {
        // The host emulation of the GPU's bf16 layer has no expert frames and
        // no non-gated experts: the GPU's bf16 bound, which CudaBf16Close
        // falls back to.
        EXPECT_TRUE(testing::RmsClose(r->y, c->y, testing::kBf16GpuTol));
      } else if (cuda) {
        // bf16 activations too: kBf16Tol where their rounding allows it.
        EXPECT_TRUE(testing::CudaBf16Close(*c, r->y));
      } else {
        EXPECT_TRUE(testing::AllClose(r->y, c->y, testing::kF32Tol));
      }
      if (c->config.routing == RoutingMode::kExpertChoice) {
        EXPECT_TRUE(testing::SameExpertChoice(*c, r->expert_ids, r->weights,
                                              r->tokens, r->slots));
      } else {
        EXPECT_TRUE(testing::SameTokenRouting(
            c->top_idx, c->top_w, r->expert_ids, r->weights, c->tokens,
            c->config.top_k, r->slots));
      }
      fs::remove_all(dir);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Workers, DistributedGoldenTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3),
                       ::testing::Values(std::string("cpu"),
                                         std::string("cuda"))),
    [](const auto& info) {
      return absl::StrCat("P", std::get<0>(info.param), "_",
                          std::get<1>(info.param));
    });

// FP8 weights on the GPU: the router alone, and one worker (the GPU check
// runs each CUDA test binary within a time limit; P is covered above).
INSTANTIATE_TEST_SUITE_P(
    Fp8Workers, DistributedGoldenTest,
    ::testing::Combine(::testing::Values(0, 1),
                       ::testing::Values(std::string("cuda_fp8"))),
    [](const auto& info) {
      return absl::StrCat("P", std::get<0>(info.param), "_",
                          std::get<1>(info.param));
    });

// A bf16 client's answer is the fp32 answer rounded once, at every worker
// count: in layers without shared experts the workers send their results
// in bf16 (Step.result_dtype), which must not change a bit of it; with
// shared experts they stay fp32. Routing is the fp32 path's.
TEST(DistributedGolden, Bf16AnswersAreTheF32AnswerRoundedOnceForEveryP) {
  for (const char* name : {"deepseek_v3_like", "qwen2_moe_like", "mixtral_like",
                           "expert_choice"}) {
    SCOPED_TRACE(name);
    auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                     ".safetensors");
    ASSERT_TRUE(c.ok()) << c.status();
    const testing::HfWriteOptions o;  // the case at its default layer
    auto written =
        testing::WriteCaseCheckpoint(*c, std::string(name) + "_bf16_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& dir = *written;
    std::vector<float> x = c->x;
    for (float& v : x) v = Bf16ToF32(F32ToBf16(v));

    ForwardResult exact;
    std::vector<float> once;  // the fp32 answer rounded to bf16
    for (int workers : {0, 1, 2, 3}) {
      SCOPED_TRACE(absl::StrCat("P=", workers));
      testing::LocalCluster cluster;
      testing::LocalCluster::Options co;
      co.model_args = {"--model=" + dir};
      co.workers = workers;
      ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
      ForwardOptions fo;
      fo.token_ids = c->token_ids;
      fo.routing = true;
      if (workers == 0) {
        auto r =
            cluster.client().Forward(static_cast<int32_t>(o.layer), x.data(),
                                     c->tokens, c->config.hidden, fo);
        ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
        exact = *r;
        once = exact.y;
        for (float& v : once) v = Bf16ToF32(F32ToBf16(v));
      }
      fo.dtype = moe::v1::BF16;
      auto r = cluster.client().Forward(static_cast<int32_t>(o.layer), x.data(),
                                        c->tokens, c->config.hidden, fo);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
      EXPECT_EQ(r->expert_ids, exact.expert_ids);
      EXPECT_EQ(r->weights, exact.weights);
      ASSERT_EQ(r->y.size(), once.size());
      EXPECT_EQ(
          0, std::memcmp(r->y.data(), once.data(), once.size() * sizeof(float)))
          << "a bf16 answer is not the fp32 answer rounded once";
    }
    fs::remove_all(dir);
  }
}

// --dispatch-dtype fp8 and bf16: every golden case through a router with 2
// and 3 CPU workers, whose dispatch all-to-all carries each row as e4m3
// codes plus one fp32 scale per 128 channels, or as bf16. The router routes
// on the unquantised x, so the routing is bit for bit the exact path's (the
// router alone, P = 0, where nothing crosses and the flag changes nothing:
// y there is within the fp32 tolerance; nor with one worker, P = 1: the
// same bits). y carries the rounding of the
// experts' inputs: within kFp8DispatchTol / kBf16DispatchTol
// (tests/testutil/compare.h), the same at every P (rows are quantised one
// by one).
TEST(DistributedGolden, PackedDispatchKeepsRoutingExactAndYWithinItsTolerance) {
  const std::pair<const char*, testing::RmsTolerance> kDispatch[] = {
      {"fp8", testing::kFp8DispatchTol}, {"bf16", testing::kBf16DispatchTol}};
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    const testing::HfWriteOptions o;  // the case at its default layer
    auto written = testing::WriteCaseCheckpoint(*c, c->name + "_packed_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& dir = *written;
    for (const auto& [dtype, tol] : kDispatch) {
      SCOPED_TRACE(dtype);
      ForwardResult exact, first;
      for (int workers : {0, 1, 2, 3}) {
        SCOPED_TRACE(absl::StrCat("P=", workers));
        testing::LocalCluster cluster;
        testing::LocalCluster::Options co;
        co.model_args = {"--model=" + dir};
        co.workers = workers;
        co.router_args = {absl::StrCat("--dispatch-dtype=", dtype)};
        ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
        ForwardOptions fo;
        fo.token_ids = c->token_ids;
        fo.routing = true;
        auto r =
            cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                     c->tokens, c->config.hidden, fo);
        ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
        if (workers == 0) {
          EXPECT_TRUE(testing::AllClose(r->y, c->y, testing::kF32Tol));
          exact = *r;
          continue;
        }
        EXPECT_EQ(r->expert_ids, exact.expert_ids);
        EXPECT_EQ(r->weights, exact.weights);
        if (workers == 1) {
          EXPECT_EQ(r->y, exact.y) << "one worker exchanges nothing";
          continue;
        }
        EXPECT_TRUE(testing::RmsClose(r->y, c->y, tol));
        if (workers == 2) {
          first = *r;
        } else {
          EXPECT_EQ(r->y, first.y) << "P=3 differs from P=2";
        }
      }
    }
    fs::remove_all(dir);
  }
}

// Direct steps (--direct-step-tokens; every golden case is small enough
// for the default): each worker gets the rows its experts need from the
// router and the router sums the outputs. Every case through 2 and 3
// workers, exact and with packed dispatch, gives the bits of the
// all-to-all path (--direct-step-tokens=0), routing included.
TEST(DistributedGolden, DirectStepsGiveTheAllToAllBits) {
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    const testing::HfWriteOptions o;  // the case at its default layer
    auto written = testing::WriteCaseCheckpoint(*c, c->name + "_direct_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& dir = *written;
    for (const char* dtype : {"f32", "bf16", "fp8"}) {
      for (int workers : {2, 3}) {
        SCOPED_TRACE(absl::StrCat(dtype, " P=", workers));
        ForwardResult r[2];
        for (int direct : {0, 1}) {
          testing::LocalCluster cluster;
          testing::LocalCluster::Options co;
          co.model_args = {"--model=" + dir};
          co.workers = workers;
          co.router_args = {
              absl::StrCat("--dispatch-dtype=", dtype),
              absl::StrCat("--direct-step-tokens=", direct ? c->tokens : 0)};
          ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
          ForwardOptions fo;
          fo.token_ids = c->token_ids;
          fo.routing = true;
          auto got = cluster.client().Forward(static_cast<int32_t>(o.layer),
                                              c->x.data(), c->tokens,
                                              c->config.hidden, fo);
          ASSERT_TRUE(got.ok()) << got.status() << "\n" << cluster.Logs();
          r[direct] = *std::move(got);
        }
        EXPECT_EQ(r[1].expert_ids, r[0].expert_ids);
        EXPECT_EQ(r[1].weights, r[0].weights);
        EXPECT_EQ(r[1].y, r[0].y) << "a direct step changed the answer";
        if (std::string(dtype) == "f32") {
          EXPECT_TRUE(testing::AllClose(r[1].y, c->y, testing::kF32Tol));
        }
      }
    }
    fs::remove_all(dir);
  }
}

// The late-2026 shapes (tests/testutil/many_experts.h: 512 experts top-22
// with groups, 896 top-16, softmax over 640 top-22), each written as a
// checkpoint and served by a router with 2 CPU workers: requests of up to
// --direct-step-tokens=8 rows take direct steps, the whole case (41 rows,
// the last 20 all picking one hot expert) the all-to-all. Routing ids are
// the reference's and y within the fp32 golden tolerance, row for row.
TEST(DistributedGolden, ManyExpertsAndSlotsOverDirectAndAllToAllSteps) {
  constexpr int64_t kTokens = 41, kHotFrom = 21, kDirect = 8;
  for (const testing::ManyExpertsShape& s : testing::ManyExpertsShapes()) {
    SCOPED_TRACE(s.name);
    auto c = testing::RandomCase(s.config, kTokens, 23, s.name);
    const int64_t hot = s.config.num_experts / 2 + 1;
    testing::MakeExpertHot(c, hot, kHotFrom);
    const testing::HfWriteOptions o;
    auto written = testing::WriteCaseCheckpoint(c, s.name + "_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + *written};
    co.workers = 2;
    co.direct_step_tokens = kDirect;
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    const int64_t H = s.config.hidden, k = s.config.top_k;
    // Rows [begin, end) of the case: 0 rows, 1, 7 (both direct), the 7 hot
    // ones at the end (direct), and all 41 (the all-to-all).
    const std::pair<int64_t, int64_t> slices[] = {
        {0, 0}, {0, 1}, {3, 10}, {kTokens - 7, kTokens}, {0, kTokens}};
    for (const auto& [begin, end] : slices) {
      SCOPED_TRACE(absl::StrCat("rows ", begin, "..", end));
      const int64_t n = end - begin;
      ForwardOptions fo;
      fo.routing = true;
      auto r = cluster.client().Forward(static_cast<int32_t>(o.layer),
                                        c.x.data() + begin * H, n, H, fo);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
      ASSERT_EQ(r->tokens, n);
      const std::vector<float> y(c.y.begin() + begin * H,
                                 c.y.begin() + end * H);
      const std::vector<int64_t> idx(c.top_idx.begin() + begin * k,
                                     c.top_idx.begin() + end * k);
      const std::vector<float> w(c.top_w.begin() + begin * k,
                                 c.top_w.begin() + end * k);
      EXPECT_TRUE(testing::AllClose(r->y, y, testing::kF32Tol));
      if (n == 0) continue;
      EXPECT_TRUE(testing::SameTokenRouting(idx, w, r->expert_ids, r->weights,
                                            n, k, r->slots));
      if (end == kTokens) {
        // Nearly every hot row: under a group limit sigmoid scores saturate
        // and another group can now and then outscore the hot one.
        const int64_t from = std::max(begin, kHotFrom) - begin;
        const int64_t hot_slots =
            std::count(r->expert_ids.begin() + from * k, r->expert_ids.end(),
                       static_cast<int32_t>(hot));
        EXPECT_GE(hot_slots * 5, (n - from) * 4)
            << "expert " << hot << " is not hot";
      }
    }
    fs::remove_all(*written);
  }
}

TEST(DistributedGolden, HashLayerRefusesBadTokenIdsAndAnswersTheNext) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/deepseek_v4_hash.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const testing::HfWriteOptions o;
  auto dir = testing::WriteCaseCheckpoint(*c, "hash_ids_", o);
  ASSERT_TRUE(dir.ok()) << dir.status();
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + *dir};
  co.workers = 2;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->hash_vocab(), c->config.hash_vocab);
  auto forward = [&](std::vector<int64_t> ids) {
    ForwardOptions fo;
    fo.token_ids = std::move(ids);
    return cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                    c->tokens, c->config.hidden, fo);
  };
  std::vector<int64_t> shorter(c->token_ids.begin(), c->token_ids.end() - 1);
  std::vector<int64_t> outside = c->token_ids;
  outside[3] = c->config.hash_vocab;
  const std::pair<std::vector<int64_t>, std::string> bad[] = {
      {{}, "token_ids: required"},
      {shorter, "expected one per row"},
      {outside, "token_ids[3]"}};
  for (const auto& [ids, want] : bad) {
    auto r = forward(ids);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_NE(r.status().message().find(want), absl::string_view::npos)
        << r.status();
  }
  auto good = forward(c->token_ids);
  ASSERT_TRUE(good.ok()) << good.status() << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(good->y, c->y, testing::kF32Tol));
  fs::remove_all(*dir);
}

TEST(DistributedGolden, MoeCliForwardWritesTheGoldenOutput) {
  // The acceptance path: a checkpoint served by a router and 3 workers,
  // queried with moe-cli forward, files in and out.
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/deepseek_v3_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("cli_ckpt_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kDeepseekV3;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  SafetensorsWriter in;
  in.AddF32("x", {c->tokens, c->config.hidden}, c->x);
  ASSERT_TRUE(in.WriteFile(dir + "/in.safetensors").ok());

  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = 3;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto run = testing::RunCommand(
      {testing::CliBinary(), "forward", "--target=" + cluster.target(),
       "--layer=1", "--input=" + dir + "/in.safetensors",
       "--output=" + dir + "/out.safetensors", "--routing"},
      std::chrono::seconds(30));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto out = SafetensorsFile::Open(dir + "/out.safetensors");
  ASSERT_TRUE(out.ok()) << out.status();
  auto y = (*out)->ReadF32("y", {c->tokens, c->config.hidden});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c->y, testing::kF32Tol));
  auto idx = (*out)->ReadI64("top_idx");
  auto w = (*out)->ReadF32("top_w");
  ASSERT_TRUE(idx.ok() && w.ok());
  std::vector<int32_t> ids(idx->begin(), idx->end());
  EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, ids, *w,
                                        c->tokens, c->config.top_k,
                                        c->config.top_k));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe

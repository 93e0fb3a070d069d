// The expert pass on a GPU (engine/cuda/cuda_experts.h): the grouped GEMM
// and the per-expert loop give the same rows (odd counts, experts without
// rows, a first offset past 0) and match a host reference on the same bf16
// values; auto mode measures both; graph replays equal eager passes over
// 100 steps of repeating and changing shapes. Skips, with the reason, when
// no CUDA device is visible.
#include "engine/cuda/cuda_experts.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/dtype.h"
#include "engine/cuda/cublas_api.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/padded_pass.h"
#include "engine/cuda/row_bucket.h"
#include "gtest/gtest.h"
#include "kernels/cuda/kernels.h"
#include "tests/testutil/cuda_test_util.h"

namespace moe {
namespace {

constexpr int64_t kH = 72, kI = 40, kE = 6, kMaxRows = 96;

class CudaExpertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
      GTEST_SKIP() << s.message();
    }
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              cudaSuccess);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> w(0.0f, 0.2f);
    experts_.resize(kE);
    w13_.resize(kE);
    w2_.resize(kE);
    for (int64_t e = 0; e < kE; ++e) {
      for (int64_t i = 0; i < 2 * kI * kH; ++i) w13_[e].push_back(Bf(w(rng)));
      for (int64_t i = 0; i < kH * kI; ++i) w2_[e].push_back(Bf(w(rng)));
      experts_[e].inter = kI;
      experts_[e].w13 = testing::Upload(w13_[e]);
      experts_[e].w2 = testing::Upload(w2_[e]);
      ptrs_.push_back(&experts_[e]);
    }
    auto lt = LtMatmul::Create();
    ASSERT_TRUE(lt.ok()) << lt.status();
    lt_ = std::move(*lt);
    in_ = *DeviceBuffer::Allocate(kMaxRows * kH * 2);
    out_ = *DeviceBuffer::Allocate(kMaxRows * kH * 2);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  static uint16_t Bf(float v) { return F32ToBf16(v); }
  // Fresh random rows into in_ (on the stream, so ordered with the passes),
  // and a sentinel over out_.
  std::vector<uint16_t> NewInput(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<uint16_t> x(kMaxRows * kH);
    for (auto& v : x) v = Bf(d(rng));
    EXPECT_EQ(cudaMemcpyAsync(in_.data(), x.data(), x.size() * 2,
                              cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(out_.data(), 0x7f, out_.size(), stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return x;
  }
  std::vector<uint16_t> Out() {
    std::vector<uint16_t> y(kMaxRows * kH);
    EXPECT_EQ(cudaMemcpyAsync(y.data(), out_.data(), y.size() * 2,
                              cudaMemcpyDeviceToHost, stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return y;
  }
  absl::Status Run(CudaExperts& x, const std::vector<int64_t>& offsets) {
    return x.Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                 /*out_f32=*/false, stream_);
  }
  std::unique_ptr<CudaExperts> Make(GemmPathTable::Mode mode,
                                    int64_t graph_rows, int max_graphs = 8) {
    CudaExpertsOptions o;
    o.gemm_path = mode;
    o.max_graph_rows = graph_rows;
    o.max_graphs = max_graphs;
    // A table of its own: each case measures, whatever ran before it.
    o.paths = std::make_shared<SharedGemmPathTable>(kMaxRows);
    auto x = CudaExperts::Create(kMaxRows, kH, kI, kE, o);
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? std::move(*x) : nullptr;
  }
  // The pass's rows of `got` against the host reference `want`, within the
  // bf16 bound.
  static void ExpectNearReference(const std::vector<uint16_t>& got,
                                  const std::vector<float>& want,
                                  const std::vector<int64_t>& offsets) {
    for (int64_t r = offsets.front(); r < offsets.back(); ++r) {
      for (int64_t c = 0; c < kH; ++c) {
        const size_t i = r * kH + c;
        ASSERT_NEAR(Bf16ToF32(got[i]), want[i],
                    2e-2f * (1 + std::fabs(want[i])))
            << "row " << r << " col " << c;
      }
    }
  }
  // The pass on the host from the same bf16 values, with the device's
  // roundings (gate-up and h to bf16; biases, when set, added to the bf16
  // gate, up and output values and rounded again), and the experts' act.
  std::vector<float> Reference(const std::vector<uint16_t>& x,
                               const std::vector<int64_t>& offsets) {
    std::vector<float> y(kMaxRows * kH, 0.0f);
    for (int64_t e = 0; e < kE; ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        std::vector<float> h(kI);
        for (int64_t i = 0; i < kI; ++i) {
          double g = 0, u = 0;
          for (int64_t c = 0; c < kH; ++c) {
            const double xv = Bf16ToF32(x[r * kH + c]);
            g += xv * Bf16ToF32(w13_[e][i * kH + c]);
            u += xv * Bf16ToF32(w13_[e][(kI + i) * kH + c]);
          }
          float gb = Bf16ToF32(Bf(static_cast<float>(g)));
          float ub = Bf16ToF32(Bf(static_cast<float>(u)));
          if (!b1_.empty()) {
            gb = Bf16ToF32(Bf(gb + b1_[e][i]));
            ub = Bf16ToF32(Bf(ub + b3_[e][i]));
          }
          h[i] = Bf16ToF32(Bf(kernels::GatedAct(experts_[e].act, gb, ub)));
        }
        for (int64_t c = 0; c < kH; ++c) {
          double acc = 0;
          for (int64_t i = 0; i < kI; ++i)
            acc += h[i] * Bf16ToF32(w2_[e][c * kI + i]);
          y[r * kH + c] = static_cast<float>(acc);
          if (!b2_.empty()) {
            y[r * kH + c] =
                Bf16ToF32(Bf(Bf16ToF32(Bf(y[r * kH + c])) + b2_[e][c]));
          }
        }
      }
    }
    return y;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<CudaExpert> experts_;
  std::vector<const CudaExpert*> ptrs_;
  std::vector<std::vector<uint16_t>> w13_, w2_;
  std::vector<std::vector<float>> b1_, b3_, b2_;  // empty: no biases
  std::unique_ptr<LtMatmul> lt_;
  DeviceBuffer in_, out_;
};

TEST_F(CudaExpertsTest, GroupedAndLoopGiveTheSameRowsOnOddCounts) {
  auto loop = Make(GemmPathTable::Mode::kLoop, 0);
  auto grouped = Make(GemmPathTable::Mode::kGrouped, 0);
  ASSERT_TRUE(loop && grouped);
  if (!grouped->grouped_available()) {
    GTEST_SKIP() << "no cublasGemmGroupedBatchedEx in this cuBLAS";
  }
  const std::vector<std::vector<int64_t>> cases = {{0, 3, 1, 0, 7, 5},
                                                   {1, 1, 1, 1, 1, 1},
                                                   {0, 0, 0, 0, 0, 13},
                                                   {17, 0, 9, 31, 0, 2},
                                                   {0, 0, 1, 0, 0, 0}};
  for (int64_t first : {0, 3}) {
    for (const auto& counts : cases) {
      const auto offsets = testing::GroupOffsets(first, counts);
      SCOPED_TRACE(::testing::Message()
                   << "first " << first << ", last " << offsets.back());
      const auto x = NewInput(offsets.back() + first);
      ASSERT_TRUE(Run(*loop, offsets).ok());
      const auto a = Out();
      NewInput(offsets.back() + first);
      ASSERT_TRUE(Run(*grouped, offsets).ok());
      const auto b = Out();
      ASSERT_TRUE(grouped->grouped_available()) << "the grouped call failed";
      const auto want = Reference(x, offsets);
      for (int64_t r = 0; r < kMaxRows; ++r) {
        for (int64_t c = 0; c < kH; ++c) {
          const size_t i = r * kH + c;
          if (r < offsets.front() || r >= offsets.back()) {
            // Rows outside the pass are left alone by both paths.
            ASSERT_EQ(a[i], 0x7f7f) << "row " << r;
            ASSERT_EQ(b[i], 0x7f7f) << "row " << r;
            continue;
          }
          const float tol = 2e-2f * (1 + std::fabs(want[i]));
          ASSERT_NEAR(Bf16ToF32(a[i]), want[i], tol) << "loop row " << r;
          ASSERT_NEAR(Bf16ToF32(b[i]), want[i], tol) << "grouped row " << r;
          ASSERT_NEAR(Bf16ToF32(a[i]), Bf16ToF32(b[i]), tol) << "row " << r;
        }
      }
    }
  }
}

TEST_F(CudaExpertsTest, AutoModeTimesBothPathsPerBucketAndKeepsOne) {
  auto x = Make(GemmPathTable::Mode::kAuto, 0);
  ASSERT_TRUE(x);
  if (!x->grouped_available()) {
    GTEST_SKIP() << "no cublasGemmGroupedBatchedEx in this cuBLAS";
  }
  const auto offsets =
      testing::GroupOffsets(0, {5, 0, 11, 2, 9, 3});  // 30 rows: bucket 32
  const auto in = NewInput(1);
  ASSERT_TRUE(Run(*x, offsets).ok());
  const auto first = Out();
  bool found = false;
  const GemmPathTable paths = x->gemm_paths();
  for (const GemmPathChoice& c : paths.choices()) {
    if (c.bucket != 32) {
      EXPECT_EQ(c.chosen, GemmPath::kUnmeasured) << "bucket " << c.bucket;
      continue;
    }
    found = true;
    EXPECT_GT(c.loop_us, 0);
    EXPECT_GT(c.grouped_us, 0);
    EXPECT_NE(c.chosen, GemmPath::kUnmeasured);
  }
  EXPECT_TRUE(found);
  // Later passes of the bucket run the chosen path: the same bits as the
  // measuring pass gave.
  NewInput(1);
  ASSERT_TRUE(Run(*x, offsets).ok());
  EXPECT_EQ(Out(), first);
  const auto want = Reference(in, offsets);
  for (int64_t i = 0; i < offsets.back() * kH; ++i) {
    ASSERT_NEAR(Bf16ToF32(first[i]), want[i], 2e-2f * (1 + std::fabs(want[i])));
  }
}

// Needs no GPU: the library opens and every symbol the grouped path calls
// resolves (a misspelt name would turn the grouped path off everywhere).
TEST(CublasApi, OpensWithEverySymbolTheGroupedPathCalls) {
  auto api = Cublas();
  if (!api.ok() && absl::StrContains(api.status().message(), "cannot load")) {
    GTEST_SKIP() << api.status().message();
  }
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_NE((*api)->Create, nullptr);
  EXPECT_NE((*api)->SetStream, nullptr);
  EXPECT_NE((*api)->SetWorkspace, nullptr);
  EXPECT_NE((*api)->GemmGroupedBatchedEx, nullptr);
  EXPECT_STRNE((*api)->GetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "");
}

// A cuBLASLt GEMM writes a fresh (never memset) buffer and one of our
// kernels reads all of it: the values match a host reference. Under
// compute-sanitizer initcheck this is the control of the engine's initcheck
// step (scripts/gpu-check.sh, "initcheck-control"): if initcheck reports
// this kernel's reads, it does not see cuBLAS's writes on that GPU, and the
// engine's reports of reads after a GEMM are the tool's, not ours.
TEST(LtMatmulTest, GemmOutputReadByAKernelMatchesTheHost) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
    GTEST_SKIP() << s.message();
  }
  constexpr int64_t m = 48, n = 80, k = 64;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<uint16_t> x(m * k), w(n * k);
  for (auto& v : x) v = F32ToBf16(d(rng));
  for (auto& v : w) v = F32ToBf16(d(rng));
  DeviceBuffer dx = testing::Upload(x), dw = testing::Upload(w);
  auto dd = DeviceBuffer::Allocate(m * n * 2);
  auto df = DeviceBuffer::Allocate(m * n * 4);
  ASSERT_TRUE(dd.ok() && df.ok());
  auto lt = LtMatmul::Create();
  ASSERT_TRUE(lt.ok()) << lt.status();
  ASSERT_TRUE((*lt)
                  ->Run(m, n, k, dx.data(), dw.data(), dd->data(), CUDA_R_16BF,
                        CUDA_R_16BF, nullptr)
                  .ok());
  ASSERT_EQ(kernels::cuda::ConvertBf16ToF32(dd->as<uint16_t>(), m * n,
                                            df->as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = testing::Download<float>(*df, m * n);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i) {
        want += double(Bf16ToF32(x[r * k + i])) * Bf16ToF32(w[c * k + i]);
      }
      // bf16 output: one rounding, 2^-8 relative, plus accumulation order.
      ASSERT_NEAR(y[r * n + c], want, 1e-2 * std::abs(want) + 1e-3)
          << "row " << r << " col " << c;
    }
  }
}

// What the backend does at its first step: every bucket timed up front.
TEST_F(CudaExpertsTest, CalibrateMeasuresEveryBucketBeforeAnyPass) {
  auto x = Make(GemmPathTable::Mode::kAuto, 0);
  ASSERT_TRUE(x);
  if (!x->grouped_available()) {
    GTEST_SKIP() << "no cublasGemmGroupedBatchedEx in this cuBLAS";
  }
  ASSERT_TRUE(
      x->Calibrate(*lt_, ptrs_, in_.as<uint16_t>(), out_.data(), stream_).ok());
  const GemmPathTable paths = x->gemm_paths();
  ASSERT_EQ(paths.choices().size(), RowBuckets(kMaxRows).size());
  for (const GemmPathChoice& c : paths.choices()) {
    EXPECT_NE(c.chosen, GemmPath::kUnmeasured) << "bucket " << c.bucket;
    EXPECT_GT(c.loop_us, 0) << "bucket " << c.bucket;
    EXPECT_GT(c.grouped_us, 0) << "bucket " << c.bucket;
  }
  // Passes after it are right whichever path each bucket kept.
  for (const auto& counts : std::vector<std::vector<int64_t>>{
           {0, 0, 1, 0, 0, 0}, {9, 0, 4, 11, 0, 3}, {16, 16, 16, 16, 16, 16}}) {
    const auto offsets = testing::GroupOffsets(0, counts);
    const auto in = NewInput(offsets.back());
    ASSERT_TRUE(Run(*x, offsets).ok());
    const auto y = Out();
    const auto want = Reference(in, offsets);
    for (int64_t i = 0; i < offsets.back() * kH; ++i) {
      ASSERT_NEAR(Bf16ToF32(y[i]), want[i], 2e-2f * (1 + std::fabs(want[i])));
    }
  }
}

// 100 steps, new rows every step, shapes from a few that repeat and some
// that do not: a graph-capturing instance gives exactly the bits of an
// eager one (graph sizes, no graphs: grouped passes padded alike), per
// path, and did replay graphs.
TEST_F(CudaExpertsTest, GraphReplaysEqualEagerPassesOverAHundredSteps) {
  std::vector<GemmPathTable::Mode> modes = {GemmPathTable::Mode::kLoop};
  {
    auto probe = Make(GemmPathTable::Mode::kGrouped, 0);
    ASSERT_TRUE(probe);
    if (probe->grouped_available())
      modes.push_back(GemmPathTable::Mode::kGrouped);
  }
  const std::vector<std::vector<int64_t>> repeating = {
      {1, 0, 2, 0, 1, 0}, {0, 3, 0, 1, 1, 1}, {2, 2, 2, 2, 2, 2}};
  for (auto mode : modes) {
    SCOPED_TRACE(static_cast<int>(mode));
    auto eager = Make(mode, kMaxRows, /*max_graphs=*/0);
    auto graphed = Make(mode, kMaxRows);
    ASSERT_TRUE(eager && graphed);
    std::mt19937_64 rng(11);
    const int64_t allocations = DeviceAllocationCount();
    for (int step = 0; step < 100; ++step) {
      std::vector<int64_t> counts;
      if (step % 4 == 3) {  // a shape that (almost surely) does not repeat
        std::uniform_int_distribution<int64_t> d(0, 9);
        for (int e = 0; e < kE; ++e) counts.push_back(d(rng));
      } else {
        counts = repeating[step % 3];
      }
      const auto offsets = testing::GroupOffsets(0, counts);
      NewInput(1000 + step);
      ASSERT_TRUE(Run(*eager, offsets).ok()) << "step " << step;
      const auto a = Out();
      NewInput(1000 + step);
      ASSERT_TRUE(Run(*graphed, offsets).ok()) << "step " << step;
      ASSERT_EQ(Out(), a) << "step " << step;
    }
    EXPECT_EQ(DeviceAllocationCount(), allocations);
    EXPECT_GT(graphed->graph_stats().captures, 0);
    EXPECT_GT(graphed->graph_stats().replays, 50);
    EXPECT_EQ(graphed->graph_stats().failures, 0);
    EXPECT_LE(graphed->graphs_held(), 8u);
    EXPECT_EQ(eager->graph_stats().captures, 0);
  }
}

// The 2026 expert options (engine/cuda/cuda_experts.h): DeepSeek-V4's
// silu_clamp on either path, gpt-oss's clamped activation with per-expert
// biases (the loop, whatever the mode asks: the grouped call has no place
// for them), against the host reference, with limits that make the clamps
// bite.
TEST_F(CudaExpertsTest, ClampedActivationsAndBiasesMatchTheHostReference) {
  const std::vector<int64_t> offsets =
      testing::GroupOffsets(2, {5, 0, 17, 1, 9, 30});
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "gptoss with biases" : "silu_clamp");
    std::mt19937_64 rng(bias ? 3 : 4);
    std::normal_distribution<float> d(0.0f, 0.5f);
    for (int64_t e = 0; e < kE; ++e) {
      experts_[e].act.act = bias ? kernels::kActGptOss : kernels::kActSiluClamp;
      experts_[e].act.alpha = 1.702f;
      experts_[e].act.limit = 0.75f;
      if (!bias) continue;
      b1_.emplace_back(kI);
      b3_.emplace_back(kI);
      b2_.emplace_back(kH);
      for (float& v : b1_.back()) v = d(rng);
      for (float& v : b3_.back()) v = d(rng);
      for (float& v : b2_.back()) v = d(rng);
      experts_[e].b1 = testing::Upload(b1_.back());
      experts_[e].b3 = testing::Upload(b3_.back());
      experts_[e].b2 = testing::Upload(b2_.back());
    }
    for (const GemmPathTable::Mode mode :
         {GemmPathTable::Mode::kLoop, GemmPathTable::Mode::kGrouped}) {
      auto x = Make(mode, 0);
      ASSERT_TRUE(x);
      const auto in = NewInput(bias ? 21 : 22);
      ASSERT_TRUE(Run(*x, offsets).ok());
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode));
      ExpectNearReference(Out(), Reference(in, offsets), offsets);
    }
  }
}

// Non-gated relu2 experts (Nemotron 3, engine/cuda/expert_image.h): w13
// holds the up rows alone, the first GEMM writes u alone and the activation
// reads it, on every path (the loop, grouped, grouped padded under graphs).
// The reference reads u from the gated experts' W3 rows, which are the
// non-gated experts' w13 here, and ignores g as relu2 does.
TEST_F(CudaExpertsTest, NonGatedRelu2ExpertsMatchTheHostReference) {
  const std::vector<int64_t> offsets =
      testing::GroupOffsets(1, {3, 11, 0, 6, 1, 20});
  for (int64_t e = 0; e < kE; ++e) {
    const std::vector<uint16_t> up(w13_[e].begin() + kI * kH, w13_[e].end());
    experts_[e].w13 = testing::Upload(up);
    experts_[e].gated = false;
    experts_[e].act.act = kernels::kActRelu2;
  }
  for (const auto& [mode, graph_rows] :
       {std::pair{GemmPathTable::Mode::kLoop, int64_t{0}},
        std::pair{GemmPathTable::Mode::kGrouped, int64_t{0}},
        std::pair{GemmPathTable::Mode::kGrouped, int64_t{256}}}) {
    SCOPED_TRACE(::testing::Message()
                 << "mode " << static_cast<int>(mode) << ", graphs to "
                 << graph_rows << " rows");
    auto x = Make(mode, graph_rows);
    ASSERT_TRUE(x);
    const auto in = NewInput(31);
    for (int rep = 0; rep < 3; ++rep) {  // captured, then replayed
      ASSERT_TRUE(Run(*x, offsets).ok());
    }
    ExpectNearReference(Out(), Reference(in, offsets), offsets);
  }
}

TEST_F(CudaExpertsTest, MalformedOffsetsAreRefusedBeforeAnyLaunch) {
  auto x = Make(GemmPathTable::Mode::kLoop, 0);
  ASSERT_TRUE(x);
  EXPECT_EQ(Run(*x, {0, 4, 2, 5, 6, 7, 8}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*x, {-1, 4, 4, 5, 6, 7, 8}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*x, {0, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run(*x, {0, 1, 2, 3, 4, 5, kMaxRows + 1}).code(),
            absl::StatusCode::kResourceExhausted);
}

// Counts whose pass really pads (within the workspaces of kMaxRows rows):
// five experts with rows, the most 7, so PlanPaddedPass makes 5 groups of
// 8 rows, 40 rows for 18. (NonGatedRelu2ExpertsMatchTheHostReference's
// counts plan 5 x 32 = 160 > kMaxRows and run unpadded.)
const std::vector<int64_t> kPaddingCounts = {3, 5, 0, 2, 1, 7};

TEST(CudaPaddedPassPlan, ThePaddedPassTestsCountsReallyPad) {
  const std::vector<int64_t> offsets = testing::GroupOffsets(1, kPaddingCounts);
  PaddedPass p;
  ASSERT_TRUE(PlanPaddedPass(offsets, kMaxRows, &p));
  EXPECT_EQ(p.groups, 5);
  EXPECT_EQ(p.group_rows, 8);
  EXPECT_GT(p.rows(), offsets.back() - offsets.front());
  PaddedPass declined;
  EXPECT_FALSE(PlanPaddedPass(testing::GroupOffsets(1, {3, 11, 0, 6, 1, 20}),
                              kMaxRows, &declined));
}

// The padded pass (graphs on: every pass of up to 256 rows pads) against the
// host reference, gated and up-only (relu2), captured then replayed, in
// both GEMM modes: padding rows must neither leak into the answer nor be
// written out.
class CudaPaddedPassTest : public CudaExpertsTest {};

TEST_F(CudaPaddedPassTest, GatedAndUpOnlyPassesThatPadMatchTheHostReference) {
  const std::vector<int64_t> offsets = testing::GroupOffsets(1, kPaddingCounts);
  PaddedPass plan;
  ASSERT_TRUE(PlanPaddedPass(offsets, kMaxRows, &plan))
      << "the pass would not pad";
  for (const bool gated : {true, false}) {
    SCOPED_TRACE(gated ? "gated" : "up only");
    if (!gated) {
      for (int64_t e = 0; e < kE; ++e) {
        const std::vector<uint16_t> up(w13_[e].begin() + kI * kH,
                                       w13_[e].end());
        experts_[e].w13 = testing::Upload(up);
        experts_[e].gated = false;
        experts_[e].act.act = kernels::kActRelu2;
      }
    }
    for (const GemmPathTable::Mode mode :
         {GemmPathTable::Mode::kLoop, GemmPathTable::Mode::kGrouped}) {
      SCOPED_TRACE(static_cast<int>(mode));
      auto x = Make(mode, /*graph_rows=*/256);
      ASSERT_TRUE(x);
      const auto in = NewInput(gated ? 53 : 59);
      for (int rep = 0; rep < 3; ++rep) {  // captured, then replayed
        ASSERT_TRUE(Run(*x, offsets).ok());
        const std::vector<uint16_t> out = Out();
        ExpectNearReference(out, Reference(in, offsets), offsets);
        // Row 0 precedes the pass: the sentinel must survive the padding.
        for (int64_t c = 0; c < kH; ++c) {
          ASSERT_EQ(out[c], 0x7f7f) << "padding wrote row 0, col " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe

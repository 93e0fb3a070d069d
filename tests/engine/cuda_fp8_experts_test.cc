// The block-scaled FP8 expert pass on a GPU (engine/cuda/cuda_experts.h,
// CudaExpert::fp8) against its host emulation
// (tests/testutil/fp8_gpu_reference.h) on odd counts, experts without rows
// and a first offset past 0; the fused gather gives the bits of the
// ungathered pass; fp32 output is the bf16 output widened; graph replays
// equal eager passes. Needs sm_90 (cuBLASLt's block-scaled FP8); skips,
// with the reason, on other devices and where none is visible.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/fp8_image.h"
#include "engine/cuda/lt_matmul.h"
#include "gtest/gtest.h"
#include "kernels/fp8_rule.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/cuda_test_util.h"
#include "tests/testutil/fp8_gpu_reference.h"

namespace moe {
namespace {

// I = 200: W3 at row 256, h rows of 256; H = 384: three K blocks.
constexpr int64_t kH = 384, kI = 200, kE = 5, kMaxRows = 96;

class CudaFp8ExpertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
      GTEST_SKIP() << s.message();
    }
    cudaDeviceProp p;
    ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    const Fp8PathChoice c = ChooseFp8GpuPath(p.major, p.minor, kH, kE);
    if (c.path != Fp8GpuPath::kBlockScaled) GTEST_SKIP() << c.reason;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              cudaSuccess);
    for (int64_t e = 0; e < kE; ++e) {
      auto img =
          PackFp8Expert(Tensor(kI, kH, 10 * e), Tensor(kI, kH, 10 * e + 1),
                        Tensor(kH, kI, 10 * e + 2));
      ASSERT_TRUE(img.ok()) << img.status();
      images_.push_back(std::move(*img));
    }
    experts_.resize(kE);
    for (int64_t e = 0; e < kE; ++e) {
      const Fp8ExpertImage& img = images_[e];
      CudaExpert& x = experts_[e];
      x.fp8 = true;
      x.inter = kI;
      x.hidden_k = img.hidden_k;
      x.inter_pad = img.inter_pad;
      x.down_k = img.down_k;
      x.w13 = testing::Upload(img.w13);
      x.w13_scale = testing::Upload(img.w13_scale);
      x.w2 = testing::Upload(img.w2);
      x.w2_scale = testing::Upload(img.w2_scale);
      ptrs_.push_back(&x);
    }
    auto lt = LtMatmul::Create();
    ASSERT_TRUE(lt.ok()) << lt.status();
    lt_ = std::move(*lt);
    in_ = *DeviceBuffer::Allocate(kMaxRows * kH * 2);
    out_ = *DeviceBuffer::Allocate(kMaxRows * kH * 4);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  WeightTensor Tensor(int64_t rows, int64_t cols, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> v(rows * cols);
    for (float& f : v) f = d(rng);
    WeightTensor t;
    t.name = "w";
    t.shape = {rows, cols};
    t.owned.resize(v.size() * 4);
    std::memcpy(t.owned.data(), v.data(), t.owned.size());
    t.data = t.owned.data();
    return t;
  }
  std::vector<uint16_t> NewInput(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<uint16_t> x(kMaxRows * kH);
    for (auto& v : x) v = F32ToBf16(d(rng));
    EXPECT_EQ(
        cudaMemcpy(in_.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice),
        cudaSuccess);
    EXPECT_EQ(cudaMemset(out_.data(), 0x7f, out_.size()), cudaSuccess);
    return x;
  }
  template <typename T>
  std::vector<T> Out() {
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<T> y(kMaxRows * kH);
    EXPECT_EQ(cudaMemcpy(y.data(), out_.data(), y.size() * sizeof(T),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return y;
  }
  std::unique_ptr<CudaExperts> Make(int64_t graph_rows) {
    CudaExpertsOptions o;
    o.fp8 = true;
    o.max_graph_rows = graph_rows;
    o.max_graphs = 8;
    auto x = CudaExperts::Create(kMaxRows, kH, kI, kE, o);
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? std::move(*x) : nullptr;
  }
  // Rows [offsets.front(), offsets.back()) of x through their experts.
  std::vector<float> Reference(const std::vector<uint16_t>& x,
                               const std::vector<int64_t>& offsets,
                               const std::vector<int32_t>* gather = nullptr) {
    std::vector<float> y;
    for (int64_t e = 0; e < kE; ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        const int64_t src = gather != nullptr ? (*gather)[r] : r;
        std::vector<float> row(kH), out(kH);
        for (int64_t c = 0; c < kH; ++c) row[c] = Bf16ToF32(x[src * kH + c]);
        testing::Fp8ExpertRows(images_[e], row.data(), 1, out.data());
        y.insert(y.end(), out.begin(), out.end());
      }
    }
    return y;
  }
  static std::vector<float> Rows(const std::vector<uint16_t>& y, int64_t a,
                                 int64_t b) {
    std::vector<float> v;
    for (int64_t i = a * kH; i < b * kH; ++i) v.push_back(Bf16ToF32(y[i]));
    return v;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<Fp8ExpertImage> images_;
  std::vector<CudaExpert> experts_;
  std::vector<const CudaExpert*> ptrs_;
  std::unique_ptr<LtMatmul> lt_;
  DeviceBuffer in_, out_;
};

TEST_F(CudaFp8ExpertsTest, MatchesTheHostEmulationOnOddCounts) {
  auto x = Make(0);
  ASSERT_TRUE(x);
  for (const auto& [first, counts] :
       {std::pair<int64_t, std::vector<int64_t>>{0, {3, 1, 0, 7, 5}},
        {3, {17, 0, 9, 31, 2}},
        {0, {0, 0, 1, 0, 0}},
        {5, {1, 1, 1, 1, 1}}}) {
    const auto offsets = testing::GroupOffsets(first, counts);
    SCOPED_TRACE(::testing::Message() << "first " << first);
    const auto in = NewInput(offsets.back());
    ASSERT_TRUE(x->Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                       /*out_f32=*/false, stream_)
                    .ok());
    const auto y = Out<uint16_t>();
    for (int64_t r = 0; r < kMaxRows; ++r) {
      if (r < offsets.front() || r >= offsets.back()) {
        ASSERT_EQ(y[r * kH], 0x7f7f) << "row " << r << " outside the pass";
      }
    }
    EXPECT_TRUE(testing::RmsClose(Rows(y, offsets.front(), offsets.back()),
                                  Reference(in, offsets),
                                  testing::kFp8EmulationTol));
  }
}

TEST_F(CudaFp8ExpertsTest, FusedGatherGivesTheBitsOfTheGatheredRows) {
  auto x = Make(0);
  ASSERT_TRUE(x);
  const auto offsets = testing::GroupOffsets(2, {6, 0, 13, 4, 9});
  const int64_t rows = offsets.back();
  const auto in = NewInput(7);
  std::vector<int32_t> gather(rows);
  std::iota(gather.begin(), gather.end(), 0);
  std::shuffle(gather.begin(), gather.end(), std::mt19937(8));
  DeviceBuffer d_gather = testing::Upload(gather);
  ASSERT_TRUE(x->Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                     false, stream_, d_gather.as<int32_t>())
                  .ok());
  const auto a = Out<uint16_t>();
  // The same rows moved into place on the host, run without a gather.
  std::vector<uint16_t> moved(kMaxRows * kH);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(in.begin() + gather[r] * kH, kH, moved.begin() + r * kH);
  }
  ASSERT_EQ(cudaMemcpy(in_.data(), moved.data(), moved.size() * 2,
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(x->Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                     false, stream_)
                  .ok());
  const auto b = Out<uint16_t>();
  EXPECT_TRUE(std::equal(a.begin() + 2 * kH, a.begin() + rows * kH,
                         b.begin() + 2 * kH));
  EXPECT_TRUE(testing::RmsClose(Rows(a, 2, rows),
                                Reference(in, offsets, &gather),
                                testing::kFp8EmulationTol));
}

TEST_F(CudaFp8ExpertsTest, Fp32OutputIsTheBf16OutputWidened) {
  auto x = Make(0);
  ASSERT_TRUE(x);
  const std::vector<const CudaExpert*> one = {ptrs_[3]};
  const std::vector<int64_t> whole = {0, 41};
  NewInput(9);
  ASSERT_TRUE(x->Run(*lt_, one, whole, in_.as<uint16_t>(), out_.data(),
                     /*out_f32=*/false, stream_)
                  .ok());
  const auto bf = Out<uint16_t>();
  ASSERT_TRUE(x->Run(*lt_, one, whole, in_.as<uint16_t>(), out_.data(),
                     /*out_f32=*/true, stream_)
                  .ok());
  const auto f = Out<float>();
  for (int64_t i = 0; i < 41 * kH; ++i) {
    ASSERT_EQ(f[i], Bf16ToF32(bf[i])) << i;
  }
}

TEST_F(CudaFp8ExpertsTest, GraphReplaysEqualEagerPasses) {
  auto eager = Make(0);
  auto graphed = Make(kMaxRows);
  ASSERT_TRUE(eager && graphed);
  const std::vector<std::vector<int64_t>> shapes = {{1, 0, 2, 0, 1},
                                                    {3, 3, 0, 1, 2}};
  for (int step = 0; step < 12; ++step) {
    const auto offsets = testing::GroupOffsets(0, shapes[step % 2]);
    NewInput(100 + step);
    ASSERT_TRUE(eager
                    ->Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                          false, stream_)
                    .ok());
    const auto a = Out<uint16_t>();
    ASSERT_EQ(cudaMemset(out_.data(), 0x7f, out_.size()), cudaSuccess);
    ASSERT_TRUE(graphed
                    ->Run(*lt_, ptrs_, offsets, in_.as<uint16_t>(), out_.data(),
                          false, stream_)
                    .ok());
    const auto b = Out<uint16_t>();
    ASSERT_TRUE(
        std::equal(a.begin(), a.begin() + offsets.back() * kH, b.begin()))
        << "step " << step;
  }
  EXPECT_GT(graphed->graph_stats().replays, 0);
}

TEST_F(CudaFp8ExpertsTest, RefusesAGatherOverBf16Experts) {
  auto x = Make(0);
  ASSERT_TRUE(x);
  CudaExpert bf16;
  bf16.inter = kI;
  const std::vector<const CudaExpert*> one = {&bf16};
  const std::vector<int64_t> whole = {0, 1};
  DeviceBuffer idx = testing::Upload(std::vector<int32_t>{0});
  const absl::Status s = x->Run(*lt_, one, whole, in_.as<uint16_t>(),
                                out_.data(), false, stream_, idx.as<int32_t>());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// Block-scaled FP8 matmuls run whole quanta of 4 rows (kernels/fp8_rule.h):
// after Warm, every padded row count up to the quantum above max_rows (130
// here, not a multiple of 4) finds a warmed plan (no heuristic query in the
// passes), and a count that is not a multiple of 4 is refused.
TEST_F(CudaFp8ExpertsTest, WarmedPlansServeEveryPaddedRowCount) {
  const Fp8ExpertImage& img = images_[0];
  const int64_t n = 2 * img.inter_pad, k = img.hidden_k, max_rows = 130;
  const int64_t rows = kernels::Fp8MatmulRows(max_rows);
  auto x = *DeviceBuffer::Allocate(rows * k);
  auto xs = *DeviceBuffer::Allocate(kernels::Fp8Blocks(k) * rows * 4);
  auto d = *DeviceBuffer::Allocate(rows * n * 2);
  ASSERT_EQ(cudaMemset(x.data(), 0, x.size()), cudaSuccess);
  const std::vector<float> ones(kernels::Fp8Blocks(k) * rows, 1.0f);
  ASSERT_EQ(cudaMemcpy(xs.data(), ones.data(), ones.size() * 4,
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  const LtShape shape{max_rows, n, k, CUDA_R_8F_E4M3, CUDA_R_16BF};
  ASSERT_TRUE(lt_->Warm({&shape, 1}).ok());
  const int64_t queries = lt_->heuristic_queries();
  for (int64_t m = kernels::kFp8RowQuantum; m <= rows;
       m += kernels::kFp8RowQuantum) {
    ASSERT_TRUE(
        lt_->RunFp8(m, n, k, x.data(), xs.as<float>(), experts_[0].w13.data(),
                    experts_[0].w13_scale.as<float>(), d.data(), stream_)
            .ok())
        << m << " rows";
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(lt_->heuristic_queries(), queries);
  const absl::Status odd =
      lt_->RunFp8(5, n, k, x.data(), xs.as<float>(), experts_[0].w13.data(),
                  experts_[0].w13_scale.as<float>(), d.data(), stream_);
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument) << odd;
}

}  // namespace
}  // namespace moe

// A worker's step on its own, one rank over the loopback communicator: the
// Step message in, the StepResult out (worker/step_message.h over
// StepExecutor), the placement switch at the step that names it, and the
// refusals that leave the collective group intact.
#include "worker/step_executor.h"

#include <cmath>
#include <cstring>

#include "comm/loopback_communicator.h"
#include "core/dtype.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "worker/step_message.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 16, kExperts = 4, kMaxTokens = 8;

std::unique_ptr<ModelSource> Model() {
  SyntheticArgs a;
  a.hidden = kHidden;
  a.inter = 8;
  a.experts = kExperts;
  a.top_k = 2;
  a.seed = 11;
  auto model = MakeSyntheticModel(*MakeSyntheticSpec(a));
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// Rows x of `n` tokens with two slots each: token t's experts `ids` and
// weights `w` (id -1: a slot not dispatched).
moe::v1::Step MakeStep(int64_t n, const std::vector<int32_t>& ids,
                       const std::vector<float>& w, uint64_t epoch = 0) {
  std::vector<float> x(n * kHidden);
  FillSyntheticInput(5, static_cast<int64_t>(x.size()), x.data());
  moe::v1::Step step;
  step.set_step_id(42);
  step.set_layer(0);
  step.set_slots(2);
  step.set_placement_epoch(epoch);
  step.set_timeout_ms(1000);
  auto* rows = step.mutable_rows();
  rows->set_dtype(moe::v1::F32);
  rows->add_shape(n);
  rows->add_shape(kHidden);
  rows->set_data(std::string(reinterpret_cast<const char*>(x.data()),
                             x.size() * sizeof(float)));
  std::vector<int64_t> counts(kExperts, 0);
  for (int32_t e : ids) {
    if (e >= 0) ++counts[e];
  }
  step.mutable_expert_ids()->Assign(ids.begin(), ids.end());
  step.mutable_weights()->Assign(w.begin(), w.end());
  step.mutable_counts()->Assign(counts.begin(), counts.end());
  return step;
}

std::vector<float> F32Rows(const moe::v1::StepResult& r) {
  EXPECT_EQ(r.rows().dtype(), moe::v1::F32);
  std::vector<float> y(r.rows().data().size() / sizeof(float));
  std::memcpy(y.data(), r.rows().data().data(), y.size() * sizeof(float));
  return y;
}

class StepExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Model();
    auto ex = StepExecutor::Create("cpu", 1, Collective::kGloo);
    ASSERT_TRUE(ex.ok()) << ex.status();
    executor_ = std::move(*ex);
    shard_.end = kExperts;
    ASSERT_TRUE(
        executor_->Load(*model_, shard_, WeightDType::kF32, kMaxTokens).ok());
  }

  absl::Status Run(const moe::v1::Step& step, moe::v1::StepResult* result) {
    return RunStepMessage(*executor_, step, *comm_, result);
  }

  std::unique_ptr<ModelSource> model_;
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Communicator> comm_ = CreateLoopbackCommunicator();
  ExpertShard shard_;
};

TEST_F(StepExecutorTest, AnswersTheWeightedSumOfTheSlotsItWasSent) {
  // Token 0 on experts 0 and 2, token 1 on expert 3 only, token 2 on none.
  const std::vector<int32_t> ids = {0, 2, 3, -1, -1, -1};
  const std::vector<float> w = {0.25f, 0.5f, 1.0f, 0, 0, 0};
  std::vector<float> doubled = w;
  for (float& v : doubled) v *= 2;
  moe::v1::StepResult one, two;
  ASSERT_TRUE(Run(MakeStep(3, ids, w), &one).ok());
  ASSERT_TRUE(Run(MakeStep(3, ids, doubled), &two).ok());
  ASSERT_EQ(one.rows().shape(0), 3);
  ASSERT_EQ(one.rows().shape(1), kHidden);
  const std::vector<float> y1 = F32Rows(one), y2 = F32Rows(two);
  double norm0 = 0, norm1 = 0;
  for (int64_t h = 0; h < kHidden; ++h) {
    norm0 += std::abs(y1[h]);
    norm1 += std::abs(y1[kHidden + h]);
    EXPECT_EQ(y1[2 * kHidden + h], 0.0f) << "a token with no slot";
  }
  EXPECT_GT(norm0, 0);
  EXPECT_GT(norm1, 0);
  // y is linear in the slots' weights.
  for (size_t i = 0; i < y1.size(); ++i) {
    EXPECT_NEAR(y2[i], 2 * y1[i], 1e-5 * (1 + std::abs(y1[i]))) << i;
  }
  EXPECT_EQ(one.expert_rows(), 3);
  EXPECT_GE(one.step_us(), one.decode_us());
  EXPECT_GE(one.decode_us(), 0);
}

TEST_F(StepExecutorTest, Bf16ResultIsTheF32ResultRounded) {
  const std::vector<int32_t> ids = {1, 2, 0, 3};
  const std::vector<float> w = {0.5f, 0.5f, 0.75f, 0.25f};
  moe::v1::StepResult f32, bf16;
  ASSERT_TRUE(Run(MakeStep(2, ids, w), &f32).ok());
  moe::v1::Step step = MakeStep(2, ids, w);
  step.set_result_dtype(moe::v1::BF16);
  ASSERT_TRUE(Run(step, &bf16).ok());
  ASSERT_EQ(bf16.rows().dtype(), moe::v1::BF16);
  const std::vector<float> y = F32Rows(f32);
  ASSERT_EQ(bf16.rows().data().size(), y.size() * 2);
  const auto* bits =
      reinterpret_cast<const uint16_t*>(bf16.rows().data().data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(bits[i], F32ToBf16(y[i]));
}

TEST_F(StepExecutorTest, SwitchesToAStagedPlacementAtTheStepThatNamesIt) {
  const std::vector<int32_t> ids = {0, 1, 2, 3};
  const std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
  moe::v1::StepResult before;
  ASSERT_TRUE(Run(MakeStep(2, ids, w), &before).ok());

  moe::v1::StepResult result;
  absl::Status s = Run(MakeStep(2, ids, w, /*epoch=*/1), &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("placement 1"), std::string::npos) << s;
  EXPECT_TRUE(executor_->collectives_intact());

  // The next placement's weights in bf16, so that its answers differ.
  ASSERT_TRUE(executor_->Stage(*model_, shard_, WeightDType::kBF16, 1).ok());
  s = Run(MakeStep(2, ids, w), &result);  // still epoch 0 until a step says 1
  ASSERT_TRUE(s.ok()) << s;
  moe::v1::StepResult after;
  s = Run(MakeStep(2, ids, w, /*epoch=*/1), &after);
  ASSERT_TRUE(s.ok()) << s;
  // What a worker loaded with those weights answers.
  auto bf16 = StepExecutor::Create("cpu", 1, Collective::kGloo);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  ASSERT_TRUE(
      (*bf16)->Load(*model_, shard_, WeightDType::kBF16, kMaxTokens).ok());
  moe::v1::StepResult want;
  ASSERT_TRUE(RunStepMessage(**bf16, MakeStep(2, ids, w), *comm_, &want).ok());
  EXPECT_EQ(F32Rows(after), F32Rows(want));
  EXPECT_NE(F32Rows(after), F32Rows(before));
  // The old placement's weights are gone.
  s = Run(MakeStep(2, ids, w, /*epoch=*/0), &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST_F(StepExecutorTest, RefusesBadStepsBeforeAnyCollective) {
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<float> w = {0.5f, 0.5f};
  moe::v1::StepResult result;

  moe::v1::Step layer = MakeStep(1, ids, w);
  layer.set_layer(7);
  absl::Status s = Run(layer, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("layer 7"), std::string::npos) << s;
  EXPECT_TRUE(executor_->collectives_intact());

  moe::v1::Step dtype = MakeStep(1, ids, w);
  dtype.set_result_dtype(moe::v1::F16);
  s = Run(dtype, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("result_dtype"), std::string::npos) << s;

  moe::v1::Step width = MakeStep(1, ids, w);
  width.mutable_rows()->set_shape(1, kHidden + 1);
  s = Run(width, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  std::vector<int32_t> many_ids(2 * (kMaxTokens + 1), 0);
  std::vector<float> many_w(many_ids.size(), 0.5f);
  s = Run(MakeStep(kMaxTokens + 1, many_ids, many_w), &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(executor_->collectives_intact());
  EXPECT_FALSE(result.has_rows());
}

}  // namespace
}  // namespace moe

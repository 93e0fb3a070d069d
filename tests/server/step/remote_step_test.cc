// server/remote_step against a fake worker group: each rank's Step carries
// its rows and slots, the ranks' answers land in y where their tokens are,
// the shared expert is added, a direct step's slot outputs are summed here,
// a placement switched between planning and sending is planned again, and
// the group's errors come back.
#include "server/step/remote_step.h"

#include <vector>

#include "gtest/gtest.h"
#include "proto/step_codec.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 2, kSlots = 2, kExperts = 4;

// Expert e's output for row x: (e + 1) * x. Small integers and weights of
// powers of two keep every sum exact, whatever its order.
float ExpertOut(int32_t e, float x) { return static_cast<float>(e + 1) * x; }

// A worker group whose ranks compute ExpertOut in-process.
class FakeGroup : public StepGroup {
 public:
  explicit FakeGroup(int world) : world_(world) {}

  absl::StatusOr<int> AwaitGroup(
      std::chrono::steady_clock::time_point) override {
    if (!await_error_.ok()) return await_error_;
    return world_;
  }
  PlacementInForce placement() const override { return {nullptr, epoch_}; }

  // Encodes the steps as WorkerPool does, answers each from its wire Step,
  // and hands back views of the answers, each owning its message.
  absl::Status RunStep(const std::vector<StepContent>& steps,
                       std::chrono::steady_clock::time_point,
                       const std::function<void()>& overlap,
                       std::vector<StepReply>* results) override {
    ++runs_;
    sent_.assign(steps.size(), moe::v1::Step());
    for (size_t q = 0; q < steps.size(); ++q) EncodeStep(steps[q], &sent_[q]);
    if (steps.size() != static_cast<size_t>(world_)) {
      return absl::InternalError("wrong world size");
    }
    if (sent_[0].placement_epoch() != epoch_) {
      return PlacementChangedError(sent_[0].placement_epoch(), epoch_);
    }
    if (switch_after_plan_) {
      switch_after_plan_ = false;
      ++epoch_;
      return PlacementChangedError(sent_[0].placement_epoch(), epoch_);
    }
    if (overlap) overlap();
    if (!step_error_.ok()) return step_error_;
    results->assign(world_, StepReply());
    for (int q = 0; q < world_; ++q) {
      auto answer = std::make_shared<moe::v1::StepResult>();
      Answer(q, sent_[q], answer.get());
      (*results)[q] = ViewStepResult(*answer);
      (*results)[q].owner = std::move(answer);
    }
    return absl::OkStatus();
  }

  int world_;
  uint64_t epoch_ = 3;
  bool switch_after_plan_ = false;
  absl::Status await_error_, step_error_;
  int runs_ = 0;
  std::vector<moe::v1::Step> sent_;

 private:
  void Answer(int q, const moe::v1::Step& step, moe::v1::StepResult* result) {
    std::vector<float> scratch;
    EpStepInput in;
    ASSERT_TRUE(DecodeStep(step, kHidden, &scratch, &in).ok());
    EpStepTimes times;
    times.experts_us = q == 1 ? 50 : 10 + q;  // rank 1: the critical one
    times.dispatch_us = 100 + q;
    if (step.direct()) {
      if (in.tokens == 0) return;  // an idle rank: not sent, no answer
      // Each slot's output in slot order.
      std::vector<float> rows;
      std::vector<int64_t> slot_row(in.tokens * in.slots, -1);
      for (int64_t i = 0; i < in.tokens * in.slots; ++i) {
        const int32_t e = in.expert_ids[i];
        if (e < 0) continue;
        slot_row[i] = static_cast<int64_t>(rows.size()) / kHidden;
        for (int64_t h = 0; h < kHidden; ++h) {
          rows.push_back(ExpertOut(e, in.rows[(i / in.slots) * kHidden + h]));
        }
      }
      DirectOutputs out{ElementType::kF32, rows.data(), slot_row};
      EncodeDirectResult(out, in.tokens, in.slots, kHidden, times, result);
      return;
    }
    std::vector<float> y(in.tokens * kHidden, 0.0f);
    for (int64_t t = 0; t < in.tokens; ++t) {
      for (int64_t s = 0; s < in.slots; ++s) {
        const int32_t e = in.expert_ids[t * in.slots + s];
        if (e < 0) continue;
        for (int64_t h = 0; h < kHidden; ++h) {
          y[t * kHidden + h] += in.weights[t * in.slots + s] *
                                ExpertOut(e, in.rows[t * kHidden + h]);
        }
      }
    }
    EncodeStepResult(y.data(), in.tokens, kHidden, times, step.result_dtype(),
                     result);
    result->set_step_us(200 + q);
  }
};

struct Fixture {
  std::vector<float> x;
  MoeLayerConfig config;
  Routing routing;
  std::vector<float> shared;

  explicit Fixture(int64_t n) {
    config.hidden = kHidden;
    config.num_experts = kExperts;
    config.top_k = kSlots;
    routing.Reset(n, kSlots, kExperts);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < kHidden; ++h) x.push_back(t + 1 + 4 * h);
      // Token t: experts t % 4 and (t + 2) % 4 (one of them dropped for
      // token 1), weights 1/2 and 1/4.
      for (int64_t s = 0; s < kSlots; ++s) {
        const int32_t e = static_cast<int32_t>((t + 2 * s) % kExperts);
        const bool kept = !(t == 1 && s == 1);
        routing.expert[t * kSlots + s] = kept ? e : -1;
        routing.weight[t * kSlots + s] = kept ? (s == 0 ? 0.5f : 0.25f) : 0;
        routing.dispatched[t * kSlots + s] = kept;
        if (kept) ++routing.expert_counts[e];
      }
    }
    shared.assign(x.size(), 0.0f);
    for (size_t i = 0; i < x.size(); ++i) shared[i] = 1000.0f * (i + 1);
  }

  // What the layer's answer must be: the routed sum plus the shared expert.
  std::vector<float> Expected(bool with_shared) const {
    std::vector<float> y(x.size(), 0.0f);
    for (int64_t t = 0; t < routing.tokens; ++t) {
      for (int64_t s = 0; s < kSlots; ++s) {
        const int32_t e = routing.expert[t * kSlots + s];
        if (e < 0) continue;
        for (int64_t h = 0; h < kHidden; ++h) {
          y[t * kHidden + h] +=
              routing.weight[t * kSlots + s] * ExpertOut(e, x[t * kHidden + h]);
        }
      }
    }
    if (with_shared) {
      for (size_t i = 0; i < y.size(); ++i) y[i] += shared[i];
    }
    return y;
  }

  absl::Status Run(RemoteStep& step, StepGroup& group, std::vector<float>* y,
                   StageTimes* t, bool with_shared = true) {
    StepOutput out;
    out.y.assign(x.size(), -7.0f);
    out.routing = routing;
    out.times = *t;
    StageClock clock;
    RemoteStep::SharedFn fn = [&]() -> absl::StatusOr<const float*> {
      if (!with_shared) return nullptr;
      return shared.data();
    };
    StepRequest request;
    request.layer = 2;
    request.x = x.data();
    request.n = routing.tokens;
    request.deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const absl::Status s = step.Run(group, request, config, fn, clock, &out);
    *y = std::move(out.y);
    *t = out.times;
    return s;
  }
};

TEST(RemoteStep, EachRankGetsItsShardAndTheAnswersLandWhereTheirTokensAre) {
  Fixture f(/*n=*/5);
  FakeGroup group(2);
  RemoteStep step;
  std::vector<float> y;
  StageTimes t;
  ASSERT_TRUE(f.Run(step, group, &y, &t).ok());
  EXPECT_EQ(y, f.Expected(true));
  ASSERT_EQ(group.sent_.size(), 2u);
  // Tokens 0-1 to rank 0, 2-4 to rank 1 (core/even_split.h), each with the
  // whole count matrix and every rank's expert ids.
  EXPECT_EQ(group.sent_[0].rows().shape(0), 2);
  EXPECT_EQ(group.sent_[1].rows().shape(0), 3);
  EXPECT_EQ(group.sent_[1].layer(), 2);
  EXPECT_EQ(group.sent_[1].all_expert_ids_size(), 5 * kSlots);
  EXPECT_EQ(group.sent_[1].counts_size(), 2 * kExperts);
  EXPECT_EQ(group.sent_[0].placement_epoch(), 3u);
  EXPECT_FALSE(group.sent_[0].direct());
  // Rows of experts 0-1 on rank 0, 2-3 on rank 1: 9 kept slots.
  ASSERT_EQ(step.worker_rows().size(), 2u);
  EXPECT_EQ(step.worker_rows()[0] + step.worker_rows()[1], 9);
  // The critical worker is the one whose experts took longest.
  EXPECT_EQ(t.critical_worker.rank, 1);
  EXPECT_EQ(t.experts_us, 50);
  EXPECT_EQ(t.dispatch_us, 101);
  EXPECT_EQ(t.critical_worker.step_us, 201);
}

TEST(RemoteStep, WithoutASharedExpertYIsTheRoutedSum) {
  Fixture f(3);
  FakeGroup group(3);
  RemoteStep step;
  std::vector<float> y;
  StageTimes t;
  ASSERT_TRUE(f.Run(step, group, &y, &t, /*with_shared=*/false).ok());
  EXPECT_EQ(y, f.Expected(false));
}

// A direct step: each rank gets the rows of its experts' tokens, answers
// their slot outputs, and the router sums them; a rank with no slot gets
// an empty step and its empty result is not read.
TEST(RemoteStep, ADirectStepSumsTheRanksSlotOutputsHere) {
  Fixture f(/*n=*/2);  // experts 0, 2 (token 0) and 1 (token 1)
  FakeGroup group(4);
  RemoteStep step({DispatchDType::kRowType, /*direct_step_tokens=*/8});
  std::vector<float> y;
  StageTimes t;
  ASSERT_TRUE(f.Run(step, group, &y, &t).ok());
  EXPECT_EQ(y, f.Expected(true));
  ASSERT_EQ(group.sent_.size(), 4u);
  for (const auto& s : group.sent_) {
    EXPECT_TRUE(s.direct());
    EXPECT_EQ(s.result_dtype(), moe::v1::F32);
  }
  EXPECT_EQ(group.sent_[0].rows().shape(0), 1);  // expert 0: token 0
  EXPECT_EQ(group.sent_[1].rows().shape(0), 1);  // expert 1: token 1
  EXPECT_EQ(group.sent_[3].rows().shape(0), 0);  // expert 3: no token
}

TEST(RemoteStep, APlacementSwitchedAfterPlanningIsPlannedAgain) {
  Fixture f(4);
  FakeGroup group(2);
  group.switch_after_plan_ = true;
  RemoteStep step;
  std::vector<float> y;
  StageTimes t;
  ASSERT_TRUE(f.Run(step, group, &y, &t).ok());
  EXPECT_EQ(group.runs_, 2);
  EXPECT_EQ(group.sent_[0].placement_epoch(), 4u);
  EXPECT_EQ(y, f.Expected(true));
}

TEST(RemoteStep, TheGroupsErrorsComeBack) {
  Fixture f(4);
  FakeGroup group(2);
  RemoteStep step;
  std::vector<float> y;
  StageTimes t;
  group.await_error_ = absl::UnavailableError("not ready");
  EXPECT_EQ(f.Run(step, group, &y, &t).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(group.runs_, 0);
  group.await_error_ = absl::OkStatus();
  group.step_error_ = absl::InvalidArgumentError("worker rank 1: too big");
  const absl::Status s = f.Run(step, group, &y, &t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "worker rank 1: too big");
}

}  // namespace
}  // namespace moe

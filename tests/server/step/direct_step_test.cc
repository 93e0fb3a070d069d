// server/direct_step: each rank's step carries the rows of exactly the
// tokens with a slot on its experts, its own slots (the rest -1), their
// weights and its row of the count matrix, as a direct F32-answering step;
// the ranks' slot outputs come back summed per token with the routing's
// weights; a rank sent no token is not read, and a malformed or
// differently typed answer is refused naming its rank.
#include "server/step/direct_step.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 2, kSlots = 2, kExperts = 4;

// Expert e's output for value x. Small integers and weights of powers of
// two keep every sum exact, whatever its order.
float ExpertOut(int32_t e, float x) { return static_cast<float>(e + 1) * x; }

// What every rank's step starts from, for a client that asked for bf16.
StepContent Common() {
  StepContent c;
  c.in.layer = 4;
  c.in.slots = kSlots;
  c.in.dispatch = DispatchDType::kBf16;
  c.hidden = kHidden;
  c.bf16_result = true;  // a direct step's workers never round
  c.placement_epoch = 9;
  return c;
}

// Three tokens routed over experts 0-1 (rank 0) and 2-3 (rank 1): token 0
// to both ranks, token 1 to rank 0 only, token 2 to rank 1 only.
struct Routed {
  std::vector<float> x = {1, 2, 11, 12, 21, 22};
  std::vector<int32_t> ids = {0, 2, 1, -1, 3, 2};
  std::vector<float> weights = {0.5f, 0.25f, 1, 0, 0.125f, 2};
  int64_t n() const { return static_cast<int64_t>(x.size()) / kHidden; }

  // `direct`'s steps for 2 ranks (they view x and direct's buffers).
  std::vector<StepContent> Build(DirectStep& direct) const {
    std::vector<StepContent> steps;
    direct.Build(Common(), {x.data(), n(), ids, weights, 2, kExperts}, &steps);
    return steps;
  }

  // The routed sum, the reference.
  std::vector<float> Expected(bool weighted) const {
    std::vector<float> y(x.size(), 0.0f);
    for (int64_t i = 0; i < n() * kSlots; ++i) {
      if (ids[i] < 0) continue;
      const int64_t t = i / kSlots;
      for (int64_t h = 0; h < kHidden; ++h) {
        y[t * kHidden + h] += (weighted ? weights[i] : 1.0f) *
                              ExpertOut(ids[i], x[t * kHidden + h]);
      }
    }
    return y;
  }
};

// One rank's answer to `step`: each of its slots' outputs in slot order,
// as F32 (or `bf16`: the top halves, exact for these values).
struct Answer {
  explicit Answer(const StepContent& step, bool bf16 = false) {
    const EpStepInput& in = step.in;
    std::vector<float> out;
    for (int64_t i = 0; i < in.tokens * in.slots; ++i) {
      if (in.expert_ids[i] < 0) continue;
      for (int64_t h = 0; h < kHidden; ++h) {
        out.push_back(
            ExpertOut(in.expert_ids[i], in.rows[(i / in.slots) * kHidden + h]));
      }
    }
    shape = {static_cast<int64_t>(out.size()) / kHidden, kHidden};
    if (bf16) {
      for (float v : out) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint16_t top = static_cast<uint16_t>(bits >> 16);
        bytes.append(reinterpret_cast<const char*>(&top), 2);
      }
    } else {
      bytes.assign(reinterpret_cast<const char*>(out.data()), out.size() * 4);
    }
    reply.dtype = bf16 ? DType::kBF16 : DType::kF32;
    reply.shape = shape;
    reply.data = bytes;
  }
  std::vector<int64_t> shape;
  std::string bytes;
  StepReply reply;
};

TEST(DirectStep, EachRankGetsTheRowsAndSlotsOfItsExperts) {
  const Routed r;
  DirectStep direct;
  const std::vector<StepContent> steps = r.Build(direct);
  ASSERT_EQ(steps.size(), 2u);
  for (const StepContent& s : steps) {
    EXPECT_TRUE(s.direct);
    EXPECT_FALSE(s.bf16_result);
    EXPECT_EQ(s.in.layer, 4);
    EXPECT_EQ(s.in.slots, kSlots);
    EXPECT_EQ(s.in.dispatch, DispatchDType::kBf16);
    EXPECT_EQ(s.placement_epoch, 9u);
    EXPECT_EQ(s.hidden, kHidden);
  }
  // Rank 0: tokens 0 and 1.
  ASSERT_EQ(steps[0].in.tokens, 2);
  EXPECT_EQ(std::vector<float>(steps[0].in.rows, steps[0].in.rows + 4),
            (std::vector<float>{1, 2, 11, 12}));
  EXPECT_EQ(std::vector<int32_t>(steps[0].in.expert_ids.begin(),
                                 steps[0].in.expert_ids.end()),
            (std::vector<int32_t>{0, -1, 1, -1}));
  EXPECT_EQ(std::vector<float>(steps[0].in.weights.begin(),
                               steps[0].in.weights.end()),
            (std::vector<float>{0.5f, 0.25f, 1, 0}));
  EXPECT_EQ(std::vector<int64_t>(steps[0].in.counts.begin(),
                                 steps[0].in.counts.end()),
            (std::vector<int64_t>{1, 1, 0, 0, 0, 0, 0, 0}));
  // Rank 1: tokens 0 and 2.
  ASSERT_EQ(steps[1].in.tokens, 2);
  EXPECT_EQ(std::vector<float>(steps[1].in.rows, steps[1].in.rows + 4),
            (std::vector<float>{1, 2, 21, 22}));
  EXPECT_EQ(std::vector<int32_t>(steps[1].in.expert_ids.begin(),
                                 steps[1].in.expert_ids.end()),
            (std::vector<int32_t>{-1, 2, 3, 2}));
  EXPECT_EQ(std::vector<int64_t>(steps[1].in.counts.begin(),
                                 steps[1].in.counts.end()),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 2, 1}));
}

TEST(DirectStep, TheRanksSlotOutputsAreSummedWithTheRoutingsWeights) {
  const Routed r;
  DirectStep direct;
  std::vector<StepContent> steps;
  for (bool weighted : {true, false}) {
    steps = r.Build(direct);
    const Answer a0(steps[0]), a1(steps[1]);
    std::vector<float> y(r.x.size(), -7.0f);
    ASSERT_TRUE(direct
                    .Sum({a0.reply, a1.reply}, kHidden,
                         weighted ? r.weights.data() : nullptr, y.data())
                    .ok());
    EXPECT_EQ(y, r.Expected(weighted)) << "weighted " << weighted;
  }
  // Both ranks in BF16: the same sum (the values are bf16s).
  const Answer b0(steps[0], true), b1(steps[1], true);
  std::vector<float> y(r.x.size());
  ASSERT_TRUE(
      direct.Sum({b0.reply, b1.reply}, kHidden, r.weights.data(), y.data())
          .ok());
  EXPECT_EQ(y, r.Expected(true));
}

TEST(DirectStep, ARankSentNoTokenIsNotRead) {
  Routed r;
  r.ids = {0, 1, 1, -1, 0, 1};  // every slot on rank 0
  DirectStep direct;
  const std::vector<StepContent> steps = r.Build(direct);
  EXPECT_EQ(steps[1].in.tokens, 0);
  const Answer a0(steps[0]);
  std::vector<float> y(r.x.size());
  ASSERT_TRUE(
      direct.Sum({a0.reply, StepReply()}, kHidden, r.weights.data(), y.data())
          .ok());
  EXPECT_EQ(y, r.Expected(true));
}

TEST(DirectStep, AMalformedOrDifferentlyTypedAnswerNamesItsRank) {
  const Routed r;
  DirectStep direct;
  const std::vector<StepContent> steps = r.Build(direct);
  const Answer a0(steps[0]), b1(steps[1], /*bf16=*/true);
  std::vector<float> y(r.x.size());
  absl::Status s =
      direct.Sum({a0.reply, b1.reply}, kHidden, r.weights.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "worker rank 1 returned its expert outputs in another type");
  s = direct.Sum({StepReply(), b1.reply}, kHidden, r.weights.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            "worker rank 0 returned a malformed direct-step result");
  s = direct.Sum({a0.reply}, kHidden, r.weights.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "a direct step of 2 ranks got 1 replies");
}

}  // namespace
}  // namespace moe

// proto/step_codec: the Step's dispatch_dtype, encoded from and decoded to
// the engine's DispatchDType, and refused by name when it is none of them.
#include "proto/step_codec.h"

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

// A step's content over spans of the caller's vectors.
StepContent Content(const std::vector<float>& x, int64_t hidden, int64_t slots,
                    const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& all,
                    const std::vector<float>& weights,
                    const std::vector<int64_t>& counts) {
  StepContent c;
  c.in.tokens = static_cast<int64_t>(x.size()) / hidden;
  c.in.rows = x.data();
  c.in.slots = slots;
  c.in.expert_ids = ids;
  c.in.all_expert_ids = all;
  c.in.weights = weights;
  c.in.counts = counts;
  c.hidden = hidden;
  return c;
}

moe::v1::Step Encoded(DispatchDType dispatch) {
  const std::vector<float> x(2 * 4, 0.5f), w(2, 1.0f);
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int64_t> counts = {1, 1};
  StepContent c = Content(x, 4, 1, ids, ids, w, counts);
  c.in.step_id = 7;
  c.in.timeout = std::chrono::milliseconds(100);
  c.in.dispatch = dispatch;
  moe::v1::Step step;
  EncodeStep(c, &step);
  return step;
}

// What EncodeStep writes, DecodeStep reads back: every field of the
// content, and the router's own fields beside it.
TEST(StepCodec, DecodeStepReadsBackWhatEncodeStepWrote) {
  const std::vector<float> x = {1, 2, 3, 4.25f, 5, 6};
  const std::vector<float> w = {0.5f, 0.25f, 0.125f, 1};
  const std::vector<int32_t> ids = {3, -1, 0, 2}, all = {3, -1, 0, 2, 1, 1};
  const std::vector<int64_t> counts = {1, 0, 1, 1, 0, 2, 0, 0};
  StepContent c = Content(x, 3, 2, ids, all, w, counts);
  c.in.step_id = 9;
  c.in.layer = 5;
  c.in.timeout = std::chrono::milliseconds(250);
  c.in.dispatch = DispatchDType::kBf16;
  c.bf16_result = true;
  c.direct = true;
  c.placement_epoch = 4;
  moe::v1::Step step;
  EncodeStep(c, &step);
  EXPECT_EQ(step.result_dtype(), moe::v1::BF16);
  EXPECT_TRUE(step.direct());
  EXPECT_EQ(step.placement_epoch(), 4u);
  EXPECT_EQ(step.generation(), 0u);
  std::vector<float> scratch;
  EpStepInput in;
  ASSERT_TRUE(DecodeStep(step, 3, &scratch, &in).ok());
  EXPECT_EQ(in.step_id, 9u);
  EXPECT_EQ(in.layer, 5);
  EXPECT_EQ(in.tokens, 2);
  EXPECT_EQ(in.slots, 2);
  EXPECT_EQ(in.timeout.count(), 250);
  EXPECT_EQ(in.dispatch, DispatchDType::kBf16);
  EXPECT_EQ(std::vector<float>(in.rows, in.rows + 6), x);
  EXPECT_EQ(std::vector<int32_t>(in.expert_ids.begin(), in.expert_ids.end()),
            ids);
  EXPECT_EQ(
      std::vector<int32_t>(in.all_expert_ids.begin(), in.all_expert_ids.end()),
      all);
  EXPECT_EQ(std::vector<float>(in.weights.begin(), in.weights.end()), w);
  EXPECT_EQ(std::vector<int64_t>(in.counts.begin(), in.counts.end()), counts);
  c.bf16_result = false;
  c.direct = false;
  EncodeStep(c, &step);
  EXPECT_EQ(step.result_dtype(), moe::v1::F32);
  EXPECT_FALSE(step.direct());
}

TEST(StepCodec, DecodeStepTimesReadsEveryTime) {
  moe::v1::StepResult r;
  const EpStepTimes t{.dispatch_us = 1,
                      .experts_us = 2,
                      .combine_us = 3,
                      .gather_us = 4,
                      .sum_us = 5,
                      .expert_rows = 6};
  const float y = 0;
  EncodeStepResult(&y, 0, 1, t, moe::v1::F32, &r);
  r.set_decode_us(7);
  r.set_step_us(8);
  const WorkerStageTimes d = DecodeStepTimes(r, 3);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.gather_us, 4);
  EXPECT_EQ(d.dispatch_wait_us, 1 - 4);
  EXPECT_EQ(d.experts_us, 2);
  EXPECT_EQ(d.combine_wait_us, 3 - 5);
  EXPECT_EQ(d.sum_us, 5);
  EXPECT_EQ(d.decode_us, 7);
  EXPECT_EQ(d.step_us, 8);
}

TEST(StepCodec, DispatchDTypeTravelsInTheStep) {
  for (DispatchDType d :
       {DispatchDType::kRowType, DispatchDType::kBf16, DispatchDType::kFp8}) {
    const moe::v1::Step step = Encoded(d);
    std::vector<float> scratch;
    EpStepInput in;
    in.dispatch = d == DispatchDType::kFp8 ? DispatchDType::kRowType
                                           : DispatchDType::kFp8;
    ASSERT_TRUE(DecodeStep(step, 4, &scratch, &in).ok());
    EXPECT_EQ(in.dispatch, d);
  }
  EXPECT_EQ(Encoded(DispatchDType::kFp8).dispatch_dtype(),
            moe::v1::DISPATCH_FP8);
  EXPECT_EQ(Encoded(DispatchDType::kRowType).dispatch_dtype(),
            moe::v1::DISPATCH_ROW_TYPE);
}

// Rows whose values are all bf16 travel as BF16 (half the bytes), others
// as F32, whatever block of the rows the first wider value sits in; both
// decode to x's exact bits.
TEST(StepCodec, RowsTravelAsBf16ExactlyWhenEveryValueIsOne) {
  const int64_t tokens = 37, H = 300;  // 11100 values: three 4096-blocks
  std::vector<float> x(tokens * H);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = Bf16ToF32(F32ToBf16(static_cast<float>(i % 977) * -0.37f + 1.5f));
  }
  const std::vector<float> w(tokens, 1.0f);
  const std::vector<int32_t> ids(tokens, 0);
  const std::vector<int64_t> counts = {tokens};
  for (long wider : {-1L, 5L, 4100L, 11099L}) {
    SCOPED_TRACE(wider);
    std::vector<float> v = x;
    if (wider >= 0) v[wider] = 1.0f + 1.0f / 1024;  // not a bf16
    const StepContent c = Content(v, H, 1, ids, ids, w, counts);
    moe::v1::Step step;
    EncodeStep(c, &step);
    EXPECT_EQ(step.rows().dtype(), wider < 0 ? moe::v1::BF16 : moe::v1::F32);
    std::vector<float> scratch;
    EpStepInput in;
    ASSERT_TRUE(DecodeStep(step, H, &scratch, &in).ok());
    ASSERT_EQ(0, std::memcmp(in.rows, v.data(), v.size() * 4));
  }
}

TEST(StepCodec, AnUnknownDispatchDTypeIsRefusedByName) {
  moe::v1::Step step = Encoded(DispatchDType::kFp8);
  step.set_dispatch_dtype(static_cast<moe::v1::DispatchDtype>(9));
  std::vector<float> scratch;
  EpStepInput in;
  const absl::Status s = DecodeStep(step, 4, &scratch, &in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dispatch_dtype"), std::string::npos) << s;
}

// A direct step's result: the rows of the worker's slots in slot order
// (whatever order its buffer holds them in), F32 or BF16 as they are, and
// back into the router's buffer at the rank's offset; a result of the wrong
// size is refused.
TEST(StepCodec, DirectResultsTravelInSlotOrder) {
  constexpr int64_t H = 3;
  // Two tokens, two slots: buffer rows 2, -, 0, 1 (expert order).
  const std::vector<float> rows = {10, 11, 12, 20, 21, 22, 30, 31, 32};
  const std::vector<int64_t> slot_row = {2, -1, 0, 1};
  DirectOutputs out;
  out.type = ElementType::kF32;
  out.rows = rows.data();
  out.slot_row = slot_row;
  EpStepTimes times;
  times.expert_rows = 3;
  moe::v1::StepResult result;
  EncodeDirectResult(out, 2, 2, H, times, &result);
  EXPECT_EQ(result.rows().dtype(), moe::v1::F32);
  EXPECT_EQ(result.expert_rows(), 3);
  std::vector<char> dst;
  ElementType type = ElementType::kBF16;
  ASSERT_TRUE(
      DecodeDirectResult(ViewStepResult(result), 1, 3, H, &type, &dst, 1).ok());
  EXPECT_EQ(type, ElementType::kF32);
  ASSERT_EQ(dst.size(), 4 * H * sizeof(float));
  std::vector<float> got(3 * H);
  std::memcpy(got.data(), dst.data() + H * sizeof(float), got.size() * 4);
  EXPECT_EQ(got, (std::vector<float>{30, 31, 32, 10, 11, 12, 20, 21, 22}));

  // bf16 rows travel as they are.
  const std::vector<uint16_t> half = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  out.type = ElementType::kBF16;
  out.rows = half.data();
  EncodeDirectResult(out, 2, 2, H, times, &result);
  EXPECT_EQ(result.rows().dtype(), moe::v1::BF16);
  ASSERT_TRUE(
      DecodeDirectResult(ViewStepResult(result), 0, 3, H, &type, &dst, 0).ok());
  EXPECT_EQ(type, ElementType::kBF16);
  std::vector<uint16_t> got_half(3 * H);
  std::memcpy(got_half.data(), dst.data(), got_half.size() * 2);
  EXPECT_EQ(got_half, (std::vector<uint16_t>{7, 8, 9, 1, 2, 3, 4, 5, 6}));

  EXPECT_EQ(DecodeDirectResult(ViewStepResult(result), 0, 2, H, &type, &dst, 0)
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace moe

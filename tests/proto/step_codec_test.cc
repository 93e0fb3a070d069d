// proto/step_codec: the Step's dispatch_dtype, encoded from and decoded to
// the engine's DispatchDType, and refused by name when it is none of them.
#include "proto/step_codec.h"

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

moe::v1::Step Encoded(DispatchDType dispatch) {
  const std::vector<float> x(2 * 4, 0.5f), w(2, 1.0f);
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<int64_t> counts = {1, 1};
  moe::v1::Step step;
  EncodeStep(7, 0, x.data(), 2, 4, 1, ids, ids, w, counts, 100, false, dispatch,
             &step);
  return step;
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
    moe::v1::Step step;
    EncodeStep(1, 0, v.data(), tokens, H, 1, ids, ids, w, counts, 100, false,
               DispatchDType::kRowType, &step);
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

}  // namespace
}  // namespace moe

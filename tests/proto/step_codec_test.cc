// proto/step_codec: the Step's dispatch_dtype, encoded from and decoded to
// the engine's DispatchDType, and refused by name when it is none of them.
#include "proto/step_codec.h"

#include <vector>

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

// proto/encoded_step: the message a rank is written carries exactly the
// Step that EncodeStep writes, with the sender's generation, step id and
// timeout; encoding again over a step of the same shape reuses its row
// buffer, and the pool hands a finished send's steps to the next one.
#include "proto/encoded_step.h"

#include <vector>

#include "gtest/gtest.h"
#include "moe/v1/worker.pb.h"
#include "proto/step_codec.h"

namespace moe {
namespace {

// Two tokens of width 3, one slot each; `scale` changes the rows' values
// (1.5: not all bf16, so they travel as F32).
struct Content {
  explicit Content(float scale) {
    for (int i = 0; i < 6; ++i) x.push_back(scale * static_cast<float>(i));
    c.in.tokens = 2;
    c.in.rows = x.data();
    c.in.slots = 1;
    c.in.layer = 3;
    c.in.expert_ids = ids;
    c.in.all_expert_ids = ids;
    c.in.weights = weights;
    c.in.counts = counts;
    c.in.dispatch = DispatchDType::kBf16;
    c.hidden = 3;
    c.bf16_result = true;
    c.direct = true;
    c.placement_epoch = 5;
  }
  std::vector<float> x;
  std::vector<int32_t> ids = {1, 0};
  std::vector<float> weights = {0.5f, 1};
  std::vector<int64_t> counts = {1, 1};
  StepContent c;
};

const std::string& Rows(const EncodedStep& s) {
  return s.message().step().rows().data();
}

TEST(EncodedStep, CarriesTheEncodedStepWithTheSendersAddress) {
  const Content content(1.5f);
  EncodedStep encoded;
  encoded.Encode(content.c);
  encoded.Address(7, 42, std::chrono::milliseconds(900));
  moe::v1::Step expected;
  EncodeStep(content.c, &expected);
  expected.set_generation(7);
  expected.set_step_id(42);
  expected.set_timeout_ms(900);
  ASSERT_TRUE(encoded.message().has_step());
  EXPECT_EQ(encoded.message().step().SerializeAsString(),
            expected.SerializeAsString());
  moe::v1::RouterMessage only_step;
  *only_step.mutable_step() = expected;
  EXPECT_EQ(encoded.message().SerializeAsString(),
            only_step.SerializeAsString());
}

TEST(EncodedStep, ASameShapedStepOverwritesTheRowsInPlace) {
  const Content first(1.5f), second(2.5f);
  EncodedStep encoded;
  encoded.Encode(first.c);
  encoded.Address(1, 1, std::chrono::milliseconds(10));
  const char* rows = Rows(encoded).data();
  encoded.Encode(second.c);
  EXPECT_EQ(Rows(encoded).data(), rows);
  // Overwritten, every field: the generation back to 0 until addressed.
  moe::v1::Step expected;
  EncodeStep(second.c, &expected);
  EXPECT_EQ(encoded.message().step().SerializeAsString(),
            expected.SerializeAsString());
}

TEST(EncodedStepPool, HandsAFinishedSendsStepsToTheNext) {
  EncodedStepPool pool;
  EXPECT_TRUE(pool.Take().empty());
  const Content content(1.5f);
  std::vector<EncodedStep> steps(2);
  for (EncodedStep& s : steps) s.Encode(content.c);
  const char* rows0 = Rows(steps[0]).data();
  const char* rows1 = Rows(steps[1]).data();
  pool.Give(std::move(steps));
  std::vector<EncodedStep> again = pool.Take();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(Rows(again[0]).data(), rows0);
  EXPECT_EQ(Rows(again[1]).data(), rows1);
  EXPECT_TRUE(pool.Take().empty());  // lent once
}

}  // namespace
}  // namespace moe

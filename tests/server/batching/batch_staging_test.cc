// BatchStaging and AnswerBatch without a step: the step's rows, row ends
// and token ids put together from requests of several dtypes, and each
// request's share of a made-up step output.
#include "server/batching/batch_staging.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kH = 2;

// A request of `rows` rows of kH values, viewed in `bytes` (kept alive by
// the caller).
std::unique_ptr<BatchRequest> Request(DType dtype,
                                      const std::vector<float>& values,
                                      std::vector<char>* bytes) {
  auto r = std::make_unique<BatchRequest>();
  r->x.rows = static_cast<int64_t>(values.size()) / kH;
  r->x.cols = kH;
  r->x.dtype = dtype;
  if (dtype == DType::kBF16) {
    bytes->resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = F32ToBf16(values[i]);
      std::memcpy(bytes->data() + 2 * i, &b, 2);
    }
  } else {
    bytes->resize(values.size() * 4);
    std::memcpy(bytes->data(), values.data(), bytes->size());
  }
  r->x.data = bytes->data();
  return r;
}

TEST(BatchStagingTest, StagesRowsEndsAndTokenIdsInRequestOrder) {
  std::vector<char> b0, b1, b2;
  Batch batch;
  batch.push_back(Request(DType::kF32, {1.5f, -2, 3, 4}, &b0));
  batch.push_back(Request(DType::kBF16, {0.5f, 8}, &b1));
  batch.push_back(Request(DType::kF32, {9, 10, 11, 12, 13, 14}, &b2));
  const std::vector<int64_t> ids2 = {7, 8, 9};
  batch[2]->token_ids = ids2;
  BatchStaging staging;
  ASSERT_EQ(staging.Stage(batch), 6);
  EXPECT_EQ(
      std::vector<float>(staging.rows(), staging.rows() + 6 * kH),
      (std::vector<float>{1.5f, -2, 3, 4, 0.5f, 8, 9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(std::vector<int64_t>(staging.ends().begin(), staging.ends().end()),
            (std::vector<int64_t>{2, 3, 6}));
  // The requests without ids ride as zeros.
  EXPECT_EQ(std::vector<int64_t>(staging.token_ids().begin(),
                                 staging.token_ids().end()),
            (std::vector<int64_t>{0, 0, 0, 7, 8, 9}));

  // The next, smaller step reuses the buffers and sends no ids at all.
  Batch next;
  next.push_back(Request(DType::kF32, {5, 6}, &b0));
  ASSERT_EQ(staging.Stage(next), 1);
  EXPECT_EQ(staging.rows()[0], 5);
  EXPECT_EQ(staging.rows()[1], 6);
  EXPECT_EQ(std::vector<int64_t>(staging.ends().begin(), staging.ends().end()),
            (std::vector<int64_t>{1}));
  EXPECT_TRUE(staging.token_ids().empty());
}

TEST(BatchStagingTest, Bf16StepOnlyWhenEveryRequestSendsAndWantsBf16) {
  std::vector<char> b0, b1;
  Batch batch;
  batch.push_back(Request(DType::kBF16, {1, 2}, &b0));
  batch.push_back(Request(DType::kBF16, {3, 4}, &b1));
  EXPECT_FALSE(AllWantBf16(batch));  // they want fp32 answers
  for (auto& r : batch) r->output_dtype = DType::kBF16;
  EXPECT_TRUE(AllWantBf16(batch));
  batch[1]->x.dtype = DType::kF32;
  EXPECT_FALSE(AllWantBf16(batch));
}

struct Answer {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::vector<float> y;
  Routing routing;
  double route_us = 0;
  double queue_us = 0;
  int64_t batch_tokens = 0;
  int batch_requests = 0;
};

// Two requests of 1 and 2 tokens; slots 2.
Batch TwoRequests(std::vector<Answer>* answers,
                  std::vector<std::vector<char>>* bytes,
                  Clock::time_point start) {
  answers->resize(2);
  bytes->resize(2);
  Batch batch;
  batch.push_back(Request(DType::kF32, {0, 0}, &(*bytes)[0]));
  batch.push_back(Request(DType::kF32, {0, 0, 0, 0}, &(*bytes)[1]));
  batch[0]->arrival = start - std::chrono::microseconds(300);
  batch[1]->arrival = start - std::chrono::microseconds(100);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->done = [answers, i](const absl::Status& s, BatchResult& res) {
      Answer& a = (*answers)[i];
      a.code = s.code();
      a.y.assign(res.y.begin(), res.y.end());
      a.routing = res.routing;
      a.route_us = res.times.route_us;
      a.queue_us = res.queue_us;
      a.batch_tokens = res.batch_tokens;
      a.batch_requests = res.batch_requests;
    };
  }
  return batch;
}

TEST(AnswerBatchTest, EachRequestGetsItsRowsRoutingAndWait) {
  const Clock::time_point start = Clock::now();
  std::vector<Answer> answers;
  std::vector<std::vector<char>> bytes;
  Batch batch = TwoRequests(&answers, &bytes, start);
  StepRunner::Output out;
  out.y = {1, 2, 3, 4, 5, 6, /*beyond the step:*/ 99, 99};
  out.routing.tokens = 3;
  out.routing.slots = 2;
  out.routing.expert = {0, 1, 2, 3, 1, -1};
  out.routing.weight = {.5f, .5f, .6f, .4f, 1, 0};
  out.times.route_us = 42;
  AnswerBatch(batch, absl::OkStatus(), out, 3, start);

  EXPECT_EQ(answers[0].code, absl::StatusCode::kOk);
  EXPECT_EQ(answers[0].y, (std::vector<float>{1, 2}));
  EXPECT_EQ(answers[0].routing.tokens, 1);
  EXPECT_EQ(answers[0].routing.slots, 2);
  EXPECT_EQ(answers[0].routing.expert, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(answers[0].routing.weight, (std::vector<float>{.5f, .5f}));
  EXPECT_DOUBLE_EQ(answers[0].queue_us, 300);

  EXPECT_EQ(answers[1].y, (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(answers[1].routing.tokens, 2);
  EXPECT_EQ(answers[1].routing.expert, (std::vector<int32_t>{2, 3, 1, -1}));
  EXPECT_EQ(answers[1].routing.weight, (std::vector<float>{.6f, .4f, 1, 0}));
  EXPECT_DOUBLE_EQ(answers[1].queue_us, 100);
  for (const Answer& a : answers) {
    EXPECT_EQ(a.route_us, 42);
    EXPECT_EQ(a.batch_tokens, 3);
    EXPECT_EQ(a.batch_requests, 2);
  }
}

TEST(AnswerBatchTest, AFailedStepAnswersEveryRequestWithItsStatusAlone) {
  const Clock::time_point start = Clock::now();
  std::vector<Answer> answers;
  std::vector<std::vector<char>> bytes;
  Batch batch = TwoRequests(&answers, &bytes, start);
  StepRunner::Output out;
  out.y = {1, 2, 3, 4, 5, 6};
  AnswerBatch(batch, absl::UnavailableError("group lost"), out, 3, start);
  for (const Answer& a : answers) {
    EXPECT_EQ(a.code, absl::StatusCode::kUnavailable);
    EXPECT_TRUE(a.y.empty());
    EXPECT_EQ(a.routing.tokens, 0);
    EXPECT_EQ(a.batch_tokens, 0);
  }
}

}  // namespace
}  // namespace moe

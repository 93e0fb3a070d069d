// FillForwardResponse and FillExpertStats without a server: the answer's
// rows in the asked dtype, routing and timing only when asked, a
// non-finite output refused naming its row, and the stats message.
#include "server/api/forward_response.h"

#include <chrono>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "proto/tensor_codec.h"
#include "server/api/info_responses.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kH = 2;

// Two tokens, two slots, with a step on a worker.
BatchResult Result(const std::vector<float>& y) {
  BatchResult r;
  r.y = y;
  r.routing.tokens = static_cast<int64_t>(y.size()) / kH;
  r.routing.slots = 2;
  r.routing.expert = {3, 1, 0, -1};
  r.routing.weight = {.75f, .25f, 1, 0};
  r.times.route_us = 11;
  r.times.experts_us = 12;
  r.times.wire_us = 13;
  r.times.critical_worker.rank = 1;
  r.times.critical_worker.sum_us = 14;
  r.queue_us = 15;
  r.batch_tokens = 7;
  r.batch_requests = 3;
  return r;
}

TEST(ForwardResponseTest, RowsOnlyUnlessRoutingOrTimingAsked) {
  const std::vector<float> y = {1.25f, -2, 3, 4};
  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(
      FillForwardResponse({}, DType::kF32, kH, Result(y), Clock::now(), &resp)
          .ok());
  auto got = DecodeMatrix(resp.output(), "output", kH, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rows, 2);
  EXPECT_EQ(got->data, y);
  EXPECT_FALSE(resp.has_routing());
  EXPECT_FALSE(resp.has_timing());
}

TEST(ForwardResponseTest, RoutingAndTimingAsAskedInTheAskedDType) {
  const std::vector<float> y = {1.3f, -2.7f, 3.1f, 4.9f};
  const Clock::time_point arrival = Clock::now() - std::chrono::milliseconds(5);
  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(FillForwardResponse({.routing = true, .timing = true},
                                  DType::kBF16, kH, Result(y), arrival, &resp)
                  .ok());
  EXPECT_EQ(resp.output().dtype(), moe::v1::BF16);
  auto got = DecodeMatrix(resp.output(), "output", kH, true);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(got->data[i], Bf16ToF32(F32ToBf16(y[i]))) << i;
  }
  const moe::v1::Routing& r = resp.routing();
  EXPECT_EQ(r.tokens(), 2);
  EXPECT_EQ(r.slots(), 2);
  EXPECT_EQ(std::vector<int32_t>(r.expert_ids().begin(), r.expert_ids().end()),
            (std::vector<int32_t>{3, 1, 0, -1}));
  EXPECT_EQ(std::vector<float>(r.weights().begin(), r.weights().end()),
            (std::vector<float>{.75f, .25f, 1, 0}));
  const moe::v1::StageTiming& t = resp.timing();
  EXPECT_EQ(t.queue_us(), 15);
  EXPECT_EQ(t.route_us(), 11);
  EXPECT_EQ(t.experts_us(), 12);
  EXPECT_EQ(t.wire_us(), 13);
  EXPECT_EQ(t.batch_tokens(), 7);
  EXPECT_EQ(t.batch_requests(), 3);
  EXPECT_GE(t.total_us(), 5000);  // from the request's arrival
  ASSERT_TRUE(t.has_critical_worker());
  EXPECT_EQ(t.critical_worker().rank(), 1);
  EXPECT_EQ(t.critical_worker().sum_us(), 14);

  // Without workers there is no critical worker.
  BatchResult local = Result(y);
  local.times.critical_worker.rank = -1;
  moe::v1::ForwardResponse resp2;
  ASSERT_TRUE(FillForwardResponse({.timing = true}, DType::kF32, kH, local,
                                  arrival, &resp2)
                  .ok());
  EXPECT_TRUE(resp2.has_timing());
  EXPECT_FALSE(resp2.timing().has_critical_worker());
  EXPECT_FALSE(resp2.has_routing());
}

TEST(ForwardResponseTest, NonFiniteOutputIsRefusedNamingTheToken) {
  const std::vector<float> y = {1, 2, 3,
                                std::numeric_limits<float>::infinity()};
  moe::v1::ForwardResponse resp;
  const absl::Status s = FillForwardResponse({.routing = true}, DType::kF32, kH,
                                             Result(y), Clock::now(), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("output: token 1 is not finite"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(resp.has_output());
  EXPECT_FALSE(resp.has_routing());
}

TEST(InfoResponsesTest, ExpertStatsCarryEveryField) {
  LayerStats l;
  l.layer = 3;
  l.steps = 4;
  l.tokens = 40;
  l.dropped_slots = 2;
  l.tokens_per_expert = {10, 30};
  l.balance.entropy = 0.5;
  l.balance.gini = 0.25;
  l.balance.max_over_mean = 1.5;
  l.rows_per_worker = {12, 28};
  l.worker_max_over_mean = 1.4;
  l.placement = {{0}, {1, 0}};
  l.replicas_per_expert = {2, 1};
  moe::v1::ExpertStats s;
  FillExpertStats(l, &s);
  EXPECT_EQ(s.layer(), 3);
  EXPECT_EQ(s.steps(), 4);
  EXPECT_EQ(s.tokens(), 40);
  EXPECT_EQ(s.dropped_slots(), 2);
  EXPECT_EQ(std::vector<int64_t>(s.tokens_per_expert().begin(),
                                 s.tokens_per_expert().end()),
            (std::vector<int64_t>{10, 30}));
  EXPECT_EQ(s.entropy(), 0.5);
  EXPECT_EQ(s.gini(), 0.25);
  EXPECT_EQ(s.max_over_mean(), 1.5);
  EXPECT_EQ(std::vector<int64_t>(s.rows_per_worker().begin(),
                                 s.rows_per_worker().end()),
            (std::vector<int64_t>{12, 28}));
  EXPECT_EQ(s.worker_max_over_mean(), 1.4);
  ASSERT_EQ(s.placement_size(), 2);
  EXPECT_EQ(s.placement(1).experts_size(), 2);
  EXPECT_EQ(s.placement(1).experts(0), 1);
  EXPECT_EQ(std::vector<int32_t>(s.replicas_per_expert().begin(),
                                 s.replicas_per_expert().end()),
            (std::vector<int32_t>{2, 1}));
}

}  // namespace
}  // namespace moe

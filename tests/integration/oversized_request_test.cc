// A request with more tokens than --max-request-tokens that is also larger
// than the router's message limit (100k tokens at H=64, 25.6 MB
// against 18087936 bytes) is answered RESOURCE_EXHAUSTED naming the flag,
// its token count and the limit, counted in moe_requests_total, and the
// next request is answered. Before, gRPC refused it by size ("Received
// message larger than max (25600018 vs. 18087936)") before the service saw
// it, so neither the flag nor the metric knew of it.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/tensor_codec.h"
#include "tests/testutil/http_get.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

using testing::LocalCluster;

constexpr int64_t kHidden = 64;
constexpr int64_t kTokens = 100000;
// --max-batch-tokens 4096 with H=64, E=8, k=2: 4096 x (64 x 4 + 8 x 8)
// bytes and 16 MiB of margin (router_part_options.h, MessageLimitFor).
constexpr int64_t kOldMessageLimit = 18087936;
static_assert(kTokens * kHidden * 4 > kOldMessageLimit);

class OversizedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.model_args = {"--synthetic", "--hidden=64", "--inter=32", "--experts=8",
                    "--top-k=2"};
    o.workers = 0;
    o.router_args = {"--metrics-listen=127.0.0.1:0",
                     "--metrics-port-file=" + cluster_.dir() + "/metrics_port",
                     "--max-batch-tokens=4096"};
    o.client.retry = false;  // every refusal is seen, and counted once
    ASSERT_TRUE(cluster_.Start(o).ok()) << cluster_.Logs();
  }

  double Requests(const std::string& method, const std::string& code) {
    int port = 0;
    std::ifstream(cluster_.dir() + "/metrics_port") >> port;
    auto text = testing::HttpGet(port, "/metrics");
    if (!text.ok()) return -1;
    return testing::MetricValue(
        *text, absl::StrCat("moe_requests_total{code=\"", code, "\",method=\"",
                            method, "\"}"));
  }

  static void ExpectNamesTheLimit(const std::string& message) {
    EXPECT_NE(message.find("--max-request-tokens"), std::string::npos)
        << message;
    EXPECT_NE(message.find(absl::StrCat(kTokens, " tokens")), std::string::npos)
        << message;
    EXPECT_NE(message.find("limit of 4096"), std::string::npos) << message;
  }

  LocalCluster cluster_;
};

TEST_F(OversizedRequestTest, ForwardIsRefusedByTokenCountAndCounted) {
  const std::vector<float> big(kTokens * kHidden, 0.5f);
  auto r = cluster_.client().Forward(0, big.data(), kTokens, kHidden, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
      << r.status();
  ExpectNamesTheLimit(std::string(r.status().message()));
  EXPECT_EQ(Requests("Forward", "RESOURCE_EXHAUSTED"), 1) << cluster_.Logs();

  const std::vector<float> small(8 * kHidden, 0.5f);
  auto next = cluster_.client().Forward(0, small.data(), 8, kHidden, {});
  EXPECT_TRUE(next.ok()) << next.status() << "\n" << cluster_.Logs();
  EXPECT_EQ(Requests("Forward", "OK"), 1);
}

// On a stream the refusal is that request's answer, and the stream goes on.
TEST_F(OversizedRequestTest, StreamAnswersTheRefusalInlineAndGoesOn) {
  grpc::ClientContext ctx;
  cluster_.client().Prepare(&ctx, std::chrono::seconds(60));
  auto stream = cluster_.client().stub()->ForwardStream(&ctx);
  {
    const std::vector<float> big(kTokens * kHidden, 0.5f);
    moe::v1::ForwardRequest req;
    req.set_request_id("big");
    EncodeMatrix(big.data(), kTokens, kHidden, moe::v1::F32,
                 req.mutable_hidden_states());
    ASSERT_TRUE(stream->Write(req));
  }
  const std::vector<float> small(8 * kHidden, 0.5f);
  moe::v1::ForwardRequest req;
  req.set_request_id("small");
  EncodeMatrix(small.data(), 8, kHidden, moe::v1::F32,
               req.mutable_hidden_states());
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();

  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(stream->Read(&resp)) << cluster_.Logs();
  EXPECT_EQ(resp.request_id(), "big");
  EXPECT_EQ(resp.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << resp.error_message();
  ExpectNamesTheLimit(resp.error_message());
  ASSERT_TRUE(stream->Read(&resp)) << cluster_.Logs();
  EXPECT_EQ(resp.request_id(), "small");
  EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
  EXPECT_FALSE(stream->Read(&resp));
  const grpc::Status done = stream->Finish();
  EXPECT_TRUE(done.ok()) << done.error_message();
  EXPECT_EQ(Requests("ForwardStream", "RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(Requests("ForwardStream", "OK"), 1);
}

}  // namespace
}  // namespace moe

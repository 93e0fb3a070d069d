// The health service in process, over a real loopback channel: Check of the
// overall, liveness and named services, readiness that leaves liveness
// alone, Shutdown for good, and Watch seeing each change once.
#include "proto/health_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/health_server.h"

namespace moe {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = HealthServer::Start("127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  // The status Check answers, or the call's error code (as a negative).
  int Check(const std::string& service) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    const grpc::Status s = stub_->Check(&ctx, req, &resp);
    return s.ok() ? resp.status() : -s.error_code();
  }

  HealthService& service() { return server_->service(); }

  std::unique_ptr<HealthServer> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, ReadinessLeavesLivenessAlone) {
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(kLivenessService), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("moe.v1.MoeService"), -grpc::StatusCode::NOT_FOUND);

  service().SetServingStatus("moe.v1.MoeService", true);
  EXPECT_EQ(Check("moe.v1.MoeService"), HealthCheckResponse::SERVING);
  service().SetServingStatus(false);
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check("moe.v1.MoeService"), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(kLivenessService), HealthCheckResponse::SERVING);
  service().SetServingStatus(true);
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
}

TEST_F(HealthServiceTest, ShutdownIsForGood) {
  service().Shutdown();
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(kLivenessService), HealthCheckResponse::NOT_SERVING);
  service().SetServingStatus(true);
  service().SetServingStatus("", true);
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchSeesEachChange) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  HealthCheckRequest req;
  req.set_service("svc");
  auto reader = stub_->Watch(&ctx, req);
  HealthCheckResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  service().SetServingStatus("svc", true);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  service().SetServingStatus("svc", true);  // no change: nothing written
  service().SetServingStatus("svc", false);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  ctx.TryCancel();
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace moe

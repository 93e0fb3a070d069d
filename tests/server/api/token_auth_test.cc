// TokenAuth: the header check itself, and Check() reading the metadata of a
// real call over an in-process channel (no network).
#include "server/api/token_auth.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "moe/v1/moe.grpc.pb.h"

namespace moe {
namespace {

constexpr grpc::StatusCode kOk = grpc::StatusCode::OK;
constexpr grpc::StatusCode kUnauthenticated = grpc::StatusCode::UNAUTHENTICATED;

TEST(TokenAuthTest, NoTokensAllowsEveryCall) {
  const TokenAuth auth({});
  EXPECT_FALSE(auth.enabled());
  EXPECT_EQ(auth.CheckHeader(std::nullopt).error_code(), kOk);
  EXPECT_EQ(auth.CheckHeader("Bearer anything").error_code(), kOk);
}

TEST(TokenAuthTest, RightTokenIsAccepted) {
  const TokenAuth auth({"s3cret"});
  EXPECT_TRUE(auth.enabled());
  EXPECT_EQ(auth.CheckHeader("Bearer s3cret").error_code(), kOk);
}

TEST(TokenAuthTest, SchemeIsCaseInsensitive) {
  const TokenAuth auth({"s3cret"});
  for (const char* header :
       {"bearer s3cret", "BEARER s3cret", "BeArEr s3cret", "Bearer  s3cret"}) {
    EXPECT_EQ(auth.CheckHeader(header).error_code(), kOk) << header;
  }
}

TEST(TokenAuthTest, WrongTokenIsRefused) {
  const TokenAuth auth({"s3cret"});
  for (const char* header : {"Bearer s3cre", "Bearer s3cret2", "Bearer S3CRET",
                             "Bearer  ", "Bearer s3cret "}) {
    const grpc::Status s = auth.CheckHeader(header);
    EXPECT_EQ(s.error_code(), kUnauthenticated) << header;
  }
  EXPECT_NE(auth.CheckHeader("Bearer nope").error_message().find("not valid"),
            std::string::npos);
}

TEST(TokenAuthTest, MissingOrMalformedHeaderIsRefused) {
  const TokenAuth auth({"s3cret"});
  const grpc::Status missing = auth.CheckHeader(std::nullopt);
  EXPECT_EQ(missing.error_code(), kUnauthenticated);
  EXPECT_NE(missing.error_message().find("Bearer <token>"), std::string::npos);
  for (const char* header : {"", "s3cret", "Bearer", "Bearer ", "Bearers3cret",
                             "Basic s3cret", "Token s3cret"}) {
    EXPECT_EQ(auth.CheckHeader(header).error_code(), kUnauthenticated)
        << "'" << header << "'";
  }
}

TEST(TokenAuthTest, EveryTokenOfARotationIsAccepted) {
  const TokenAuth auth({"old-token", "new-token", "third"});
  EXPECT_EQ(auth.CheckHeader("Bearer old-token").error_code(), kOk);
  EXPECT_EQ(auth.CheckHeader("Bearer new-token").error_code(), kOk);
  EXPECT_EQ(auth.CheckHeader("bearer third").error_code(), kOk);
  EXPECT_EQ(auth.CheckHeader("Bearer old-tokennew-token").error_code(),
            kUnauthenticated);
  EXPECT_EQ(auth.CheckHeader("Bearer other").error_code(), kUnauthenticated);
}

// GetModelInfo answers what TokenAuth::Check says of the call's metadata.
class AuthService final : public moe::v1::MoeService::Service {
 public:
  explicit AuthService(const TokenAuth* auth) : auth_(auth) {}
  grpc::Status GetModelInfo(grpc::ServerContext* ctx,
                            const moe::v1::GetModelInfoRequest*,
                            moe::v1::ModelInfo*) override {
    return auth_->Check(*ctx);
  }

 private:
  const TokenAuth* auth_;
};

TEST(TokenAuthTest, CheckReadsTheCallsAuthorizationMetadata) {
  const TokenAuth auth({"old-token", "new-token"});
  AuthService service(&auth);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = moe::v1::MoeService::NewStub(
      server->InProcessChannel(grpc::ChannelArguments()));
  auto call = [&](std::optional<std::string> header) {
    grpc::ClientContext ctx;
    if (header) ctx.AddMetadata("authorization", *header);
    moe::v1::GetModelInfoRequest req;
    moe::v1::ModelInfo info;
    return stub->GetModelInfo(&ctx, req, &info).error_code();
  };
  EXPECT_EQ(call("Bearer old-token"), kOk);
  EXPECT_EQ(call("bearer new-token"), kOk);
  EXPECT_EQ(call("Bearer wrong"), kUnauthenticated);
  EXPECT_EQ(call(std::nullopt), kUnauthenticated);
  server->Shutdown();
}

}  // namespace
}  // namespace moe

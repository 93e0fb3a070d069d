// MoeServiceImpl in-process, with no workers (P = 0): a small synthetic
// model on the router, a batcher over its step runners, and the service on
// an in-process gRPC channel. Forward answers what the engine computes for
// the same weights, bad input is refused naming the field and leaves the
// next request's answer unchanged, ForwardStream answers the same way in
// request order, and GetModelInfo reports the model.
#include "server/api/moe_service.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/synthetic_model.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "moe/v1/moe.grpc.pb.h"
#include "proto/tensor_codec.h"
#include "server/batching/batcher.h"
#include "server/step/expert_stats.h"
#include "server/step/router_model.h"
#include "server/step/step_runner.h"
#include "tests/server/batching/server_test_util.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 16;
constexpr int64_t kMaxRequestTokens = 32;

// Two MoE layers (0 and 1), so that the layer asked for matters, each
// with a shared expert.
SyntheticArgs ModelArgs() {
  SyntheticArgs a;
  a.hidden = kHidden;
  a.inter = a.shared_inter = 8;
  a.experts = 4;
  a.top_k = 2;
  a.layers = 2;
  a.seed = 11;
  return a;
}

class MoeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::SmallRouterModel m;
    ASSERT_NO_FATAL_FAILURE(testing::LoadSmallRouterModel(ModelArgs(), &m));
    model_ = std::move(m.model);
    engine_ = std::move(m.engine);

    stats_ = std::make_unique<ExpertStatsBook>(ModelArgs().experts);
    std::vector<std::unique_ptr<StepRunner>> runners;
    auto runner = CreateStepRunner(*model_, nullptr);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runners.push_back(std::move(*runner));
    Batcher::Options bo;
    bo.max_batch_tokens = 64;
    batcher_ = std::make_unique<Batcher>(bo, std::move(runners), stats_.get(),
                                         nullptr);

    MoeServiceOptions so;
    so.model = model_.get();
    so.batcher = batcher_.get();
    so.stats = stats_.get();
    so.limits.max_request_tokens = kMaxRequestTokens;
    so.max_batch_tokens = 64;
    so.device = model_->device();
    service_ = std::make_unique<MoeServiceImpl>(so);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = moe::v1::MoeService::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    if (batcher_) batcher_->Shutdown();
  }

  static std::vector<float> Input(int64_t n, uint64_t seed) {
    std::vector<float> x(n * kHidden);
    FillSyntheticInput(seed, static_cast<int64_t>(x.size()), x.data());
    return x;
  }

  static moe::v1::ForwardRequest Request(int64_t layer,
                                         const std::vector<float>& x) {
    moe::v1::ForwardRequest req;
    req.set_request_id(absl::StrCat("r", layer));
    req.set_layer(static_cast<int32_t>(layer));
    req.set_return_routing(true);
    EncodeMatrix(x.data(), static_cast<int64_t>(x.size()) / kHidden, kHidden,
                 moe::v1::F32, req.mutable_hidden_states());
    return req;
  }

  grpc::Status Forward(const moe::v1::ForwardRequest& req,
                       moe::v1::ForwardResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    return stub_->Forward(&ctx, req, resp);
  }

  // The engine's y and routing for `x` on `layer`.
  void EngineForward(int64_t layer, const std::vector<float>& x,
                     std::vector<float>* y, Routing* routing) {
    const int64_t n = static_cast<int64_t>(x.size()) / kHidden;
    y->assign(x.size(), 0.f);
    ASSERT_TRUE(
        engine_->Forward(layer, x.data(), {.n = n}, y->data(), routing).ok());
  }

  // Forwards `x` on `layer` and expects the engine's answer, bit for bit
  // (the same fp32 math on the same weights, one request per step).
  void ExpectEngineAnswer(int64_t layer, const std::vector<float>& x) {
    moe::v1::ForwardResponse resp;
    const moe::v1::ForwardRequest req = Request(layer, x);
    grpc::Status s = Forward(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.request_id(), req.request_id());
    auto y = DecodeMatrix(resp.output(), "output", kHidden, true);
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<float> want;
    Routing routing;
    EngineForward(layer, x, &want, &routing);
    ASSERT_EQ(y->rows * kHidden, static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(y->data[i], want[i]) << "layer " << layer << " value " << i;
    }
    const auto& r = resp.routing();
    EXPECT_EQ(r.tokens(), y->rows);
    EXPECT_EQ(r.slots(), routing.slots);
    EXPECT_EQ(
        std::vector<int32_t>(r.expert_ids().begin(), r.expert_ids().end()),
        std::vector<int32_t>(routing.expert.begin(), routing.expert.end()));
  }

  std::unique_ptr<RouterModel> model_;
  std::unique_ptr<LocalMoe> engine_;
  std::unique_ptr<ExpertStatsBook> stats_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<MoeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<moe::v1::MoeService::Stub> stub_;
};

TEST_F(MoeServiceTest, ForwardAnswersWhatTheEngineComputes) {
  ExpectEngineAnswer(0, Input(5, 1));
  ExpectEngineAnswer(1, Input(3, 2));
  // The two layers differ: the answer is the asked layer's.
  std::vector<float> y0, y1;
  Routing r0, r1;
  const std::vector<float> x = Input(3, 2);
  EngineForward(0, x, &y0, &r0);
  EngineForward(1, x, &y1, &r1);
  EXPECT_NE(y0, y1);
}

// A bf16 answer is the engine's fp32 answer rounded once to bf16.
TEST_F(MoeServiceTest, ForwardAnswersInTheAskedDType) {
  const std::vector<float> x = Input(4, 3);
  moe::v1::ForwardRequest req = Request(0, x);
  req.set_output_dtype(moe::v1::BF16);
  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(Forward(req, &resp).ok());
  EXPECT_EQ(resp.output().dtype(), moe::v1::BF16);
  auto y = DecodeMatrix(resp.output(), "output", kHidden, true);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> want;
  Routing routing;
  EngineForward(0, x, &want, &routing);
  ASSERT_EQ(y->data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(y->data[i], Bf16ToF32(F32ToBf16(want[i]))) << i;
  }
}

struct BadCase {
  const char* what;
  grpc::StatusCode code;
  std::string names;  // expected in the message
};

// Each bad request is refused with its code and a message naming the
// field; the good request after each still gets the engine's answer.
TEST_F(MoeServiceTest, RefusesBadInputNamingTheFieldAndServesTheNext) {
  const std::vector<float> good = Input(4, 7);
  std::vector<std::pair<BadCase, moe::v1::ForwardRequest>> cases;
  {
    std::vector<float> x(3 * (kHidden - 1), 0.5f);
    moe::v1::ForwardRequest r = Request(0, good);
    EncodeMatrix(x.data(), 3, kHidden - 1, moe::v1::F32,
                 r.mutable_hidden_states());
    cases.push_back({{"wrong hidden size", grpc::StatusCode::INVALID_ARGUMENT,
                      "hidden_states.shape[1]: expected hidden size 16"},
                     r});
  }
  {
    std::vector<float> x = good;
    x[2 * kHidden + 5] = std::numeric_limits<float>::quiet_NaN();
    cases.push_back({{"NaN", grpc::StatusCode::INVALID_ARGUMENT,
                      "hidden_states.data: non-finite value at [2, 5]"},
                     Request(0, x)});
    x[2 * kHidden + 5] = 1.f;
    x[3 * kHidden] = -std::numeric_limits<float>::infinity();
    cases.push_back({{"infinity", grpc::StatusCode::INVALID_ARGUMENT,
                      "non-finite value at [3, 0]"},
                     Request(0, x)});
  }
  cases.push_back({{"layer id", grpc::StatusCode::NOT_FOUND,
                    "layer: 7 is not an MoE layer of this model; MoE "
                    "layers: [0, 1]"},
                   Request(7, good)});
  cases.push_back({{"negative layer id", grpc::StatusCode::NOT_FOUND,
                    "layer: -1 is not an MoE layer"},
                   Request(-1, good)});
  {
    moe::v1::ForwardRequest r = Request(0, good);
    r.clear_hidden_states();
    cases.push_back({{"no hidden states", grpc::StatusCode::INVALID_ARGUMENT,
                      "hidden_states: required"},
                     r});
  }
  {
    moe::v1::ForwardRequest r = Request(0, good);
    r.mutable_hidden_states()->mutable_data()->pop_back();
    cases.push_back({{"short data", grpc::StatusCode::INVALID_ARGUMENT,
                      "hidden_states.data: expected 256 bytes"},
                     r});
  }
  {
    moe::v1::ForwardRequest r = Request(0, good);
    r.set_output_dtype(static_cast<moe::v1::DType>(99));
    cases.push_back({{"output dtype", grpc::StatusCode::INVALID_ARGUMENT,
                      "output_dtype: expected F32, BF16, F16 or unset"},
                     r});
  }
  cases.push_back({{"too many tokens", grpc::StatusCode::RESOURCE_EXHAUSTED,
                    "hidden_states.shape[0]: 33 tokens exceeds the limit of "
                    "32 per request (the router's --max-request-tokens)"},
                   Request(0, Input(kMaxRequestTokens + 1, 9))});
  {
    moe::v1::ForwardRequest r = Request(0, good);
    r.add_token_ids(1);
    cases.push_back({{"token ids", grpc::StatusCode::INVALID_ARGUMENT,
                      "token_ids: 1 ids for 4 rows"},
                     r});
  }
  for (const auto& [c, req] : cases) {
    moe::v1::ForwardResponse resp;
    grpc::Status s = Forward(req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.names), std::string::npos)
        << c.what << ": " << s.error_message();
    EXPECT_EQ(resp.output().data().size(), 0u) << c.what;
    ExpectEngineAnswer(0, good);
  }
  // Nothing refused reached a step: only the good requests were counted.
  moe::v1::GetExpertStatsRequest sreq;
  sreq.set_layer(0);
  moe::v1::ExpertStats stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetExpertStats(&ctx, sreq, &stats).ok());
  EXPECT_EQ(stats.tokens(), static_cast<int64_t>(cases.size()) * 4);
}

TEST_F(MoeServiceTest, GetModelInfoReportsTheModel) {
  grpc::ClientContext ctx;
  moe::v1::ModelInfo info;
  ASSERT_TRUE(
      stub_->GetModelInfo(&ctx, moe::v1::GetModelInfoRequest(), &info).ok());
  const SyntheticArgs a = ModelArgs();
  EXPECT_EQ(info.hidden(), a.hidden);
  EXPECT_EQ(info.inter(), a.inter);
  EXPECT_EQ(info.experts(), a.experts);
  EXPECT_EQ(info.top_k(), a.top_k);
  EXPECT_EQ(info.shared_inter(), a.shared_inter);
  EXPECT_EQ(
      std::vector<int32_t>(info.moe_layers().begin(), info.moe_layers().end()),
      (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(info.weight_dtype(), "f32");
  EXPECT_EQ(info.max_request_tokens(), kMaxRequestTokens);
  EXPECT_EQ(info.max_batch_tokens(), 64);
  EXPECT_EQ(info.device(), "cpu");
  EXPECT_TRUE(info.ready());
  EXPECT_EQ(info.num_workers(), 0);
  EXPECT_EQ(info.hash_layers_size(), 0);
  EXPECT_GT(info.router_rss_bytes(), 0);
  EXPECT_NE(info.layer_config_json().find("\"experts\":4"), std::string::npos)
      << info.layer_config_json();
}

// Without workers there is nothing to rebalance; stats of a layer the model
// lacks are NOT_FOUND.
TEST_F(MoeServiceTest, RebalanceAndStatsRefuseWhatThisRouterLacks) {
  {
    grpc::ClientContext ctx;
    moe::v1::RebalanceResponse resp;
    grpc::Status s = stub_->Rebalance(&ctx, moe::v1::RebalanceRequest(), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("this router has none"),
              std::string::npos);
  }
  grpc::ClientContext ctx;
  moe::v1::GetExpertStatsRequest req;
  req.set_layer(5);
  moe::v1::ExpertStats stats;
  grpc::Status s = stub_->GetExpertStats(&ctx, req, &stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("layer: 5"), std::string::npos);
}

// ForwardStream through the service: each request validated and run like
// Forward, answered in order, a refused one in band with its code.
TEST_F(MoeServiceTest, ForwardStreamAnswersLikeForwardInRequestOrder) {
  const std::vector<float> x0 = Input(3, 21), x1 = Input(2, 22);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub_->ForwardStream(&ctx);
  moe::v1::ForwardRequest bad = Request(7, x0);
  bad.set_request_id("bad");
  ASSERT_TRUE(stream->Write(Request(0, x0)));
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(Request(1, x1)));
  ASSERT_TRUE(stream->WritesDone());
  const std::vector<std::pair<int64_t, const std::vector<float>*>> good = {
      {0, &x0}, {1, &x1}};
  for (int i = 0; i < 3; ++i) {
    moe::v1::ForwardResponse resp;
    ASSERT_TRUE(stream->Read(&resp)) << i;
    if (i == 1) {
      EXPECT_EQ(resp.request_id(), "bad");
      EXPECT_EQ(resp.error_code(), grpc::StatusCode::NOT_FOUND);
      EXPECT_NE(resp.error_message().find("layer: 7"), std::string::npos);
      continue;
    }
    const auto& [layer, x] = good[i / 2];
    EXPECT_EQ(resp.request_id(), absl::StrCat("r", layer));
    EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
    auto y = DecodeMatrix(resp.output(), "output", kHidden, true);
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<float> want;
    Routing routing;
    EngineForward(layer, *x, &want, &routing);
    EXPECT_EQ(y->data, want) << "layer " << layer;
    EXPECT_EQ(resp.routing().tokens(), y->rows);
  }
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace moe

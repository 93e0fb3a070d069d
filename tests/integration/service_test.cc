// The distributed service against the in-process engine on a synthetic
// model: bit-identical results whatever P and whatever the batch, odd sizes,
// empty workers, every kind of bad input, streams, stats and the CLI.
#include <regex>
#include <thread>

#include "core/synthetic_model.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "proto/tensor_codec.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

using testing::LocalCluster;

constexpr int64_t kHidden = 48;

std::vector<std::string> ModelArgs(int64_t experts = 8, int64_t top_k = 2) {
  return {"--synthetic",
          absl::StrCat("--hidden=", kHidden),
          "--inter=40",
          absl::StrCat("--experts=", experts),
          absl::StrCat("--top-k=", top_k),
          "--shared-inter=24",
          "--layers=2",
          "--seed=3",
          R"(--moe-options={"shared_gate":true,"route_norm":false})"};
}

// The same synthetic layer computed in this process.
std::vector<float> Expected(int layer, const std::vector<float>& x, int64_t n,
                            int64_t experts = 8, int64_t top_k = 2) {
  SyntheticArgs a;
  a.hidden = kHidden;
  a.inter = 40;
  a.experts = experts;
  a.top_k = top_k;
  a.shared_inter = 24;
  a.layers = 2;
  a.seed = 3;
  a.options_json = R"({"shared_gate":true,"route_norm":false})";
  auto model = MakeSyntheticModel(*MakeSyntheticSpec(a));
  auto moe = LocalMoe::Create(**model, "cpu", WeightDType::kF32, 1,
                              std::max<int64_t>(n, 1));
  EXPECT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(n * kHidden);
  Routing r;
  if (!moe.ok()) return y;
  EXPECT_TRUE((*moe)->Forward(layer, x.data(), {.n = n}, y.data(), &r).ok());
  return y;
}

std::vector<float> Input(int64_t n, uint64_t seed) {
  std::vector<float> x(n * kHidden);
  FillSyntheticInput(seed, n * kHidden, x.data());
  return x;
}

// One cluster for the suite. A cluster that failed to start fails every
// case in SetUp: a fatal failure in SetUpTestSuite would only mark the
// cases skipped (gtest skips a suite whose SetUpTestSuite failed, and ctest
// then reports them as skipped, not failed).
class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster();
    LocalCluster::Options o;
    o.model_args = ModelArgs();
    o.workers = 2;
    o.router_args = {"--max-batch-tokens=512", "--batch-window-us=2000"};
    start_status_ = new absl::Status(cluster_->Start(o));
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete start_status_;
    start_status_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(start_status_->ok())
        << "the suite's cluster did not start: " << *start_status_;
  }
  MoeClient& client() { return cluster_->client(); }

  static LocalCluster* cluster_;
  static absl::Status* start_status_;
};
LocalCluster* ServiceTest::cluster_ = nullptr;
absl::Status* ServiceTest::start_status_ = nullptr;

TEST_F(ServiceTest, MatchesTheInProcessEngineBitForBit) {
  for (int layer : {0, 1}) {
    const auto x = Input(37, 10 + layer);
    auto r = client().Forward(layer, x.data(), 37, kHidden, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->y, Expected(layer, x, 37)) << "layer " << layer;
  }
}

TEST_F(ServiceTest, ConcurrentClientsGetExactlyTheirOwnResults) {
  // 16 clients with different N at once: they share steps, and each must
  // get exactly what it would get alone.
  constexpr int kClients = 16;
  std::vector<std::vector<float>> inputs(kClients), outputs(kClients);
  std::vector<absl::Status> status(kClients);
  for (int i = 0; i < kClients; ++i) inputs[i] = Input(1 + 3 * i, 100 + i);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      ForwardOptions fo;
      fo.timing = true;
      auto r =
          client().Forward(i % 2, inputs[i].data(), 1 + 3 * i, kHidden, fo);
      status[i] = r.status();
      if (r.ok()) outputs[i] = r->y;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(status[i].ok()) << i << ": " << status[i];
    EXPECT_EQ(outputs[i], Expected(i % 2, inputs[i], 1 + 3 * i))
        << "client " << i;
  }
}

TEST_F(ServiceTest, BatchesConcurrentRequests) {
  // With a 2 ms window, simultaneous requests for one layer share a step.
  std::vector<int> batch_requests(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const auto x = Input(4, 200 + i);
      ForwardOptions fo;
      fo.timing = true;
      auto r = client().Forward(0, x.data(), 4, kHidden, fo);
      if (r.ok()) batch_requests[i] = r->timing.batch_requests();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(*std::max_element(batch_requests.begin(), batch_requests.end()), 1);
}

TEST_F(ServiceTest, ZeroAndOneTokens) {
  auto empty = client().Forward(0, nullptr, 0, kHidden, {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->tokens, 0);
  EXPECT_EQ(empty->hidden, kHidden);
  const auto x = Input(1, 5);
  auto one = client().Forward(1, x.data(), 1, kHidden, {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->y, Expected(1, x, 1));
}

TEST_F(ServiceTest, RoutingAndBf16OnTheWire) {
  const auto x = Input(9, 6);
  ForwardOptions fo;
  fo.routing = true;
  fo.dtype = moe::v1::BF16;
  auto r = client().Forward(0, x.data(), 9, kHidden, fo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slots, 2);
  EXPECT_EQ(r->expert_ids.size(), 18u);
  for (int32_t e : r->expert_ids) EXPECT_TRUE(e >= 0 && e < 8);
  // bf16 input and output: close to the f32 result, not equal.
  const auto want = Expected(0, x, 9);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(r->y[i], want[i], 0.05 + 0.03 * std::fabs(want[i]));
  }
}

struct BadCase {
  const char* name;
  std::function<void(moe::v1::ForwardRequest*)> mutate;
  grpc::StatusCode code;
  const char* field;
};

TEST_F(ServiceTest, BadInputsAreRejectedAndTheNextRequestWorks) {
  const auto x = Input(3, 7);
  auto good = [&](moe::v1::ForwardRequest* r) {
    r->set_layer(0);
    EncodeMatrix(x.data(), 3, kHidden, moe::v1::F32,
                 r->mutable_hidden_states());
  };
  const std::vector<BadCase> cases = {
      {"wrong hidden size",
       [](auto* r) { r->mutable_hidden_states()->set_shape(1, kHidden + 1); },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.shape[1]"},
      {"byte length",
       [](auto* r) { r->mutable_hidden_states()->mutable_data()->pop_back(); },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.data"},
      {"unknown dtype",
       [](auto* r) {
         r->mutable_hidden_states()->set_dtype(static_cast<moe::v1::DType>(9));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.dtype"},
      {"unspecified dtype",
       [](auto* r) {
         r->mutable_hidden_states()->set_dtype(moe::v1::DTYPE_UNSPECIFIED);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.dtype"},
      {"rank 3", [](auto* r) { r->mutable_hidden_states()->add_shape(1); },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.shape"},
      {"rank 1",
       [](auto* r) {
         r->mutable_hidden_states()->mutable_shape()->RemoveLast();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.shape"},
      {"negative N",
       [](auto* r) { r->mutable_hidden_states()->set_shape(0, -3); },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states.shape"},
      {"unknown layer", [](auto* r) { r->set_layer(7); },
       grpc::StatusCode::NOT_FOUND, "layer"},
      {"N over the limit",
       [](auto* r) { r->mutable_hidden_states()->set_shape(0, 100000); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "hidden_states.shape[0]"},
      {"missing tensor", [](auto* r) { r->clear_hidden_states(); },
       grpc::StatusCode::INVALID_ARGUMENT, "hidden_states"},
      {"non-finite",
       [](auto* r) {
         float nan = std::nanf("");
         std::memcpy(r->mutable_hidden_states()->mutable_data()->data() + 4,
                     &nan, 4);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "non-finite"},
      {"bad output dtype",
       [](auto* r) { r->set_output_dtype(static_cast<moe::v1::DType>(5)); },
       grpc::StatusCode::INVALID_ARGUMENT, "output_dtype"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    moe::v1::ForwardRequest req;
    good(&req);
    c.mutate(&req);
    moe::v1::ForwardResponse resp;
    grpc::ClientContext ctx;
    client().Prepare(&ctx, std::chrono::seconds(10));
    const grpc::Status s = client().stub()->Forward(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_NE(s.error_message().find(c.field), std::string::npos)
        << s.error_message();
    auto next = client().Forward(0, x.data(), 3, kHidden, {});
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->y, Expected(0, x, 3));
  }
}

TEST_F(ServiceTest, StreamAnswersInOrderWithErrorsInline) {
  grpc::ClientContext ctx;
  client().Prepare(&ctx, std::chrono::seconds(30));
  auto stream = client().stub()->ForwardStream(&ctx);
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < 6; ++i) {
    moe::v1::ForwardRequest req;
    req.set_layer(i == 3 ? 9 : i % 2);  // request 3 names a missing layer
    req.set_request_id(absl::StrCat("r", i));
    inputs.push_back(Input(2 + i, 300 + i));
    EncodeMatrix(inputs.back().data(), 2 + i, kHidden, moe::v1::F32,
                 req.mutable_hidden_states());
    ASSERT_TRUE(stream->Write(req));
  }
  stream->WritesDone();
  moe::v1::ForwardResponse resp;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(stream->Read(&resp)) << i;
    if (i == 3) {
      EXPECT_EQ(resp.error_code(), grpc::StatusCode::NOT_FOUND);
      continue;
    }
    EXPECT_EQ(resp.request_id(), absl::StrCat("r", i));
    EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
    auto y = DecodeMatrix(resp.output(), "output", kHidden, false);
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(y->data, Expected(i % 2, inputs[i], 2 + i));
  }
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServiceTest, StatsCountEveryDispatchedSlot) {
  ASSERT_TRUE(client().GetExpertStats(1, /*reset=*/true).ok());
  const auto x = Input(50, 8);
  ASSERT_TRUE(client().Forward(1, x.data(), 50, kHidden, {}).ok());
  auto s = client().GetExpertStats(1, false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens(), 50);
  int64_t total = 0;
  for (int64_t c : s->tokens_per_expert()) total += c;
  EXPECT_EQ(total, 100);  // k = 2
  EXPECT_GT(s->normalized_entropy(), 0.5);
  EXPECT_EQ(client().GetExpertStats(5, false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, ModelInfoDescribesTheService) {
  auto info = client().GetModelInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->hidden(), kHidden);
  EXPECT_EQ(info->num_workers(), 2);
  EXPECT_TRUE(info->ready());
  EXPECT_EQ(info->moe_layers_size(), 2);
}

TEST_F(ServiceTest, TimingBreaksDownTheCriticalWorkersStep) {
  ForwardOptions fo;
  fo.timing = true;
  const auto x = Input(64, 7);
  auto r = client().Forward(1, x.data(), 64, kHidden, fo);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->timing.has_critical_worker());
  const auto& w = r->timing.critical_worker();
  EXPECT_GE(w.rank(), 0);
  EXPECT_LT(w.rank(), 2);
  EXPECT_GT(w.experts_us(), 0);
  for (double us : {w.decode_us(), w.gather_us(), w.dispatch_wait_us(),
                    w.combine_wait_us(), w.sum_us()}) {
    EXPECT_GE(us, 0);
  }
  // The router's stages are this worker's, split into its pieces.
  EXPECT_NEAR(r->timing.dispatch_us(), w.gather_us() + w.dispatch_wait_us(),
              1.0);
  EXPECT_EQ(r->timing.experts_us(), w.experts_us());
  EXPECT_GE(w.step_us() + 1.0, w.decode_us() + w.gather_us() +
                                   w.dispatch_wait_us() + w.experts_us() +
                                   w.combine_wait_us() + w.sum_us());
}

TEST_F(ServiceTest, CliReportsTheServersStatus) {
  auto bad = testing::RunCommand(
      {testing::CliBinary(), "forward", "--target=" + cluster_->target(),
       "--layer=4", "--random=3"},
      std::chrono::seconds(20));
  EXPECT_EQ(bad.exit_code, 5) << bad.output;  // NOT_FOUND
  EXPECT_NE(bad.output.find("NOT_FOUND"), std::string::npos) << bad.output;
  auto ok = testing::RunCommand(
      {testing::CliBinary(), "forward", "--target=" + cluster_->target(),
       "--layer=1", "--random=3", "--timing"},
      std::chrono::seconds(20));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("timing (us)"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("critical worker rank"), std::string::npos)
      << ok.output;
  for (const char* cmd : {"info", "health"}) {
    auto r = testing::RunCommand(
        {testing::CliBinary(), cmd, "--target=" + cluster_->target()},
        std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
  }
  // info prints GetModelInfo's memory figures: the packed size of a routed
  // expert (f32 here: 3 x H x I x 4 bytes and more) and the router's RSS.
  auto info = testing::RunCommand(
      {testing::CliBinary(), "info", "--target=" + cluster_->target()},
      std::chrono::seconds(20));
  EXPECT_TRUE(std::regex_search(
      info.output,
      std::regex(R"(memory: routed experts \d+\.\d KiB each in f32 )"
                 R"(\(\d+\.\d [KM]iB for all \d+ in \d+ MoE layers\), )"
                 R"(router rss \d+\.\d MiB \(peak \d+\.\d MiB\))")))
      << info.output;
  auto stats = testing::RunCommand({testing::CliBinary(), "stats", "--layer=0",
                                    "--target=" + cluster_->target()},
                                   std::chrono::seconds(20));
  EXPECT_EQ(stats.exit_code, 0) << stats.output;
  auto usage = testing::RunCommand({testing::CliBinary(), "frobnicate"},
                                   std::chrono::seconds(20));
  EXPECT_EQ(usage.exit_code, 64);
}

TEST(ServiceShapes, EveryPGivesTheSameBits) {
  // P = 0 (in-process), 1, 3: results must not depend on P or on which
  // worker holds an expert.
  const auto x = Input(23, 9);
  const auto want = Expected(1, x, 23);
  for (int workers : {0, 1, 3}) {
    SCOPED_TRACE(workers);
    LocalCluster cluster;
    LocalCluster::Options o;
    o.model_args = ModelArgs();
    o.workers = workers;
    ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{23}}) {  // N < P too
      auto r = cluster.client().Forward(1, x.data(), n, kHidden, {});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->y,
                std::vector<float>(want.begin(), want.begin() + n * kHidden))
          << "N=" << n;
    }
  }
}

TEST(ServiceShapes, WorkersWithoutExpertsStillTakePart) {
  // E = 2 over P = 3: rank 0 owns no expert but must join every step.
  const auto x = Input(11, 12);
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = ModelArgs(/*experts=*/2, /*top_k=*/1);
  o.workers = 3;
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  auto r = cluster.client().Forward(0, x.data(), 11, kHidden, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->y, Expected(0, x, 11, 2, 1));
}

}  // namespace
}  // namespace moe

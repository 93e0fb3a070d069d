// The caller-routing API (ForwardRequest.routing, router_logits,
// return_router_logits, shared) through a real router and workers: every
// golden case replayed from its own routing and from its gate logits, its
// shared experts apart and skipped, at P = 0 and over 2 workers on the
// direct and the all-to-all step (P = 1 and 3 for one case); a batched step
// mixing caller-routed, logits-sent and service-routed requests; and bad
// input refused with INVALID_ARGUMENT naming the field, the next request
// answered.
#include "tests/testutil/caller_routing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "proto/tensor_codec.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

using testing::ExpectCallerRoutingMatches;
using testing::GateLogits;
using testing::LogitsOptions;
using testing::ReplayOptions;

// A golden case written as a checkpoint at HfWriteOptions' default layer
// and served by a cluster; the cluster stops and the checkpoint goes with
// it.
class ServedCase {
 public:
  ServedCase() : cluster_(std::make_unique<testing::LocalCluster>()) {}
  ~ServedCase() {
    cluster_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `co` without model_args: the checkpoint's are added here.
  absl::Status Start(const testing::GoldenCase& c, const std::string& prefix,
                     testing::LocalCluster::Options co) {
    auto written = testing::WriteCaseCheckpoint(c, prefix);
    if (!written.ok()) return written.status();
    dir_ = *written;
    co.model_args = {"--model=" + dir_};
    return cluster_->Start(co);
  }
  testing::LocalCluster& cluster() { return *cluster_; }
  static int32_t layer() {
    return static_cast<int32_t>(testing::HfWriteOptions().layer);
  }

 private:
  std::unique_ptr<testing::LocalCluster> cluster_;
  std::string dir_;
};

testing::LocalCluster::Options Workers(int workers) {
  testing::LocalCluster::Options co;
  co.workers = workers;
  return co;
}

// (workers, direct step tokens): 0 = the all-to-all step.
class CallerRoutingGoldenTest
    : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(CallerRoutingGoldenTest, EveryCaseReplaysSharesAndScoresLogits) {
  const auto& [workers, direct] = GetParam();
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    testing::LocalCluster::Options co = Workers(workers);
    co.direct_step_tokens = direct;
    ServedCase served;
    ASSERT_TRUE(served.Start(*c, c->name + "_caller_", co).ok())
        << served.cluster().Logs();
    ExpectCallerRoutingMatches(served.cluster(), *c, served.layer());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CallerRoutingGoldenTest,
    ::testing::Values(std::make_tuple(0, int64_t{0}),
                      std::make_tuple(2, int64_t{0}),
                      std::make_tuple(2, int64_t{1} << 20)),
    [](const auto& info) {
      return absl::StrCat("P", std::get<0>(info.param),
                          std::get<1>(info.param) > 0 ? "_direct" : "_a2a");
    });

absl::StatusOr<testing::GoldenCase> Case(const std::string& name) {
  return testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                 ".safetensors");
}

TEST(CallerRouting, OneWorkerAndThreeWorkers) {
  for (const char* name : {"deepseek_v3_like", "nemotron3_latent"}) {
    auto c = Case(name);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(name);
    for (int workers : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("P=", workers));
      ServedCase served;
      ASSERT_TRUE(
          served.Start(*c, c->name + "_caller_p_", Workers(workers)).ok())
          << served.cluster().Logs();
      ExpectCallerRoutingMatches(served.cluster(), *c, served.layer());
    }
  }
}

// A caller-routed, a logits-sent and a service-routed request (the last
// with its shared experts apart) batched into one step each get the bits
// they get alone: routing and scoring are per request.
TEST(CallerRouting, MixedStepGivesEachRequestItsBitsAlone) {
  for (const char* name : {"deepseek_v3_like", "capacity_drop"}) {
    auto c = Case(name);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(name);
    testing::LocalCluster::Options co = Workers(2);
    co.router_args = {"--max-batch-tokens=512", "--batch-window-us=20000"};
    ServedCase served;
    ASSERT_TRUE(served.Start(*c, c->name + "_mixed_", co).ok())
        << served.cluster().Logs();
    testing::LocalCluster& cluster = served.cluster();
    const int32_t layer = served.layer();
    ForwardOptions gate;
    gate.token_ids = c->token_ids;
    gate.shared = moe::v1::SHARED_SEPARATE;
    gate.return_router_logits = true;
    std::vector<ForwardOptions> asks = {ReplayOptions(*c), LogitsOptions(*c),
                                        gate};
    for (ForwardOptions& fo : asks) {
      fo.routing = true;
      fo.timing = true;
    }
    std::vector<ForwardResult> alone;
    for (const ForwardOptions& fo : asks) {
      auto r = cluster.client().Forward(layer, c->x.data(), c->tokens,
                                        c->config.hidden, fo);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
      alone.push_back(*r);
    }
    // Three of each at once. A step of 7 or more of these 9 requests holds
    // every kind (one kind missing leaves 6 at most), however the threads'
    // arrivals split them between steps on a loaded machine.
    constexpr int kCopies = 3;
    const int total = kCopies * static_cast<int>(asks.size());
    bool shared_step = false;
    for (int attempt = 0; attempt < 10 && !shared_step; ++attempt) {
      std::vector<absl::StatusOr<ForwardResult>> got(total);
      std::vector<std::thread> threads;
      for (int i = 0; i < total; ++i) {
        threads.emplace_back([&, i] {
          got[i] =
              cluster.client().Forward(layer, c->x.data(), c->tokens,
                                       c->config.hidden, asks[i % asks.size()]);
        });
      }
      for (auto& t : threads) t.join();
      for (int i = 0; i < total; ++i) {
        ASSERT_TRUE(got[i].ok()) << got[i].status() << "\n" << cluster.Logs();
        const int with = got[i]->timing.batch_requests();
        shared_step = shared_step || with > 2 * kCopies;
        SCOPED_TRACE(i);
        const ForwardResult& want = alone[i % asks.size()];
        EXPECT_EQ(got[i]->y, want.y);
        EXPECT_EQ(got[i]->expert_ids, want.expert_ids);
        EXPECT_EQ(got[i]->weights, want.weights);
        EXPECT_EQ(got[i]->shared_output, want.shared_output);
        EXPECT_EQ(got[i]->router_logits, want.router_logits);
      }
    }
    EXPECT_TRUE(shared_step) << "the three requests never shared a step";
  }
}

// moe-cli: --routing and --return-router-logits with --shared=separate
// written to --output, then that file replayed with --routing-file and
// --router-logits-file: the layer's y both times.
TEST(CallerRouting, CliReplaysTheRoutingAndLogitsItWrote) {
  auto c = Case("deepseek_v3_like");
  ASSERT_TRUE(c.ok()) << c.status();
  ServedCase served;
  ASSERT_TRUE(served.Start(*c, "cli_caller_", Workers(0)).ok())
      << served.cluster().Logs();
  testing::LocalCluster& cluster = served.cluster();
  const std::string dir = cluster.dir();
  const std::string in = dir + "/x.safetensors";
  SafetensorsWriter w;
  w.AddF32("x", {c->tokens, c->config.hidden}, c->x);
  ASSERT_TRUE(w.WriteFile(in).ok());
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {
        testing::CliBinary(), "forward", "--target=" + cluster.target(),
        "--layer=" + std::to_string(served.layer()), "--input=" + in};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunCommand(argv, std::chrono::seconds(20));
  };
  const std::string first = dir + "/first.safetensors";
  auto r = cli({"--routing", "--return-router-logits", "--shared=separate",
                "--output=" + first});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto f = SafetensorsFile::Open(first);
  ASSERT_TRUE(f.ok()) << f.status();
  auto y = (*f)->ReadF32("y");
  auto shared = (*f)->ReadF32("shared_output");
  ASSERT_TRUE(y.ok() && shared.ok());
  std::vector<float> sum(y->size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = (*y)[i] + (*shared)[i];
  EXPECT_TRUE(testing::AllClose(sum, c->y, testing::kF32Tol));
  for (const char* flag : {"--routing-file=", "--router-logits-file="}) {
    SCOPED_TRACE(flag);
    const std::string again = dir + "/again.safetensors";
    auto replay = cli({flag + first, "--output=" + again});
    ASSERT_EQ(replay.exit_code, 0) << replay.output;
    auto g = SafetensorsFile::Open(again);
    ASSERT_TRUE(g.ok()) << g.status();
    auto y2 = (*g)->ReadF32("y");
    ASSERT_TRUE(y2.ok()) << y2.status();
    EXPECT_TRUE(testing::AllClose(*y2, c->y, testing::kF32Tol));
  }
  auto bad = cli({"--shared=sometimes"});
  EXPECT_EQ(bad.exit_code, 64) << bad.output;
}

// ForwardStream carries the same fields: a replayed request with its
// shared experts apart and its logits returned, a refused one in band, and
// the stream goes on.
TEST(CallerRouting, StreamAnswersCallerRoutingAndRefusalsInBand) {
  auto c = Case("deepseek_v3_like");
  ASSERT_TRUE(c.ok()) << c.status();
  ServedCase served;
  ASSERT_TRUE(served.Start(*c, "stream_caller_", Workers(2)).ok())
      << served.cluster().Logs();
  testing::LocalCluster& cluster = served.cluster();
  const int64_t n = c->tokens, H = c->config.hidden, k = c->config.top_k;
  grpc::ClientContext ctx;
  cluster.client().Prepare(&ctx, std::chrono::seconds(60));
  auto stream = cluster.client().stub()->ForwardStream(&ctx);
  moe::v1::ForwardRequest req;
  req.set_layer(served.layer());
  EncodeMatrix(c->x.data(), n, H, moe::v1::F32, req.mutable_hidden_states());
  moe::v1::Routing* r = req.mutable_routing();
  r->set_tokens(n);
  r->set_slots(static_cast<int32_t>(k));
  r->mutable_expert_ids()->Add(c->top_idx.begin(), c->top_idx.end());
  r->mutable_weights()->Add(c->top_w.begin(), c->top_w.end());
  req.set_shared(moe::v1::SHARED_SEPARATE);
  req.set_return_router_logits(true);
  req.set_request_id("replay");
  ASSERT_TRUE(stream->Write(req));
  r->set_expert_ids(1, r->expert_ids(0));
  req.set_request_id("repeated");
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();
  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(stream->Read(&resp)) << cluster.Logs();
  EXPECT_EQ(resp.request_id(), "replay");
  ASSERT_EQ(resp.error_code(), 0) << resp.error_message();
  auto y = DecodeMatrix(resp.output(), "output", H, false);
  auto shared = DecodeMatrix(resp.shared_output(), "shared_output", H, false);
  auto logits = DecodeMatrix(resp.router_logits(), "router_logits",
                             c->config.num_experts, false);
  ASSERT_TRUE(y.ok() && shared.ok() && logits.ok());
  std::vector<float> sum(y->data.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = y->data[i] + shared->data[i];
  }
  EXPECT_TRUE(testing::AllClose(sum, c->y, testing::kF32Tol));
  EXPECT_TRUE(
      testing::AllClose(logits->data, GateLogits(*c), testing::kF32Tol));
  ASSERT_TRUE(stream->Read(&resp)) << cluster.Logs();
  EXPECT_EQ(resp.request_id(), "repeated");
  EXPECT_EQ(resp.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(resp.error_message().find("routing.expert_ids[1] (row 0, slot 1)"),
            std::string::npos)
      << resp.error_message();
  EXPECT_FALSE(stream->Read(&resp));
  EXPECT_TRUE(stream->Finish().ok());
}

struct BadCase {
  const char* what;
  std::function<void(ForwardOptions&)> change;
  std::string message;  // a part of the message
};

// Each bad request on one cluster per case: INVALID_ARGUMENT naming the
// field (and row), and the next request answered.
void CheckBad(const std::string& name, const std::vector<BadCase>& bad) {
  auto c = Case(name);
  ASSERT_TRUE(c.ok()) << c.status();
  SCOPED_TRACE(name);
  ServedCase served;
  ASSERT_TRUE(served.Start(*c, c->name + "_bad_", Workers(0)).ok())
      << served.cluster().Logs();
  testing::LocalCluster& cluster = served.cluster();
  const int32_t layer = served.layer();
  for (const BadCase& b : bad) {
    SCOPED_TRACE(b.what);
    ForwardOptions fo = c->config.routing == RoutingMode::kTokenChoice
                            ? ReplayOptions(*c)
                            : LogitsOptions(*c);
    b.change(fo);
    auto r = cluster.client().Forward(layer, c->x.data(), c->tokens,
                                      c->config.hidden, fo);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_NE(r.status().message().find(b.message), std::string::npos)
        << r.status();
    ForwardOptions plain;
    plain.token_ids = c->token_ids;
    auto next = cluster.client().Forward(layer, c->x.data(), c->tokens,
                                         c->config.hidden, plain);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_TRUE(testing::AllClose(next->y, c->y, testing::kF32Tol));
  }
}

TEST(CallerRouting, BadInputIsRefusedNamingTheFieldAndTheNextAnswered) {
  auto logits_of = [](ForwardOptions& fo, const testing::GoldenCase& c) {
    fo.routing_slots = 0;
    fo.router_logits = GateLogits(c);
    fo.router_logits_experts = c.config.num_experts;
  };
  auto c = Case("deepseek_v3_like");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t k = c->config.top_k, E = c->config.num_experts;
  CheckBad("deepseek_v3_like",
           {{"out of range",
             [&](ForwardOptions& fo) { fo.routing_expert_ids[k] = E; },
             "routing.expert_ids[" + std::to_string(k) + "] (row 1"},
            {"repeated id",
             [&](ForwardOptions& fo) {
               fo.routing_expert_ids[2 * k + 1] = fo.routing_expert_ids[2 * k];
             },
             "(row 2, slot 1): expert"},
            {"wrong k",
             [&](ForwardOptions& fo) {
               fo.routing_slots = static_cast<int32_t>(k - 1);
             },
             "routing.slots: wrong k"},
            {"wrong length",
             [&](ForwardOptions& fo) { fo.routing_weights.pop_back(); },
             "routing.weights:"},
            {"non-finite weight",
             [&](ForwardOptions& fo) { fo.routing_weights[k] = NAN; },
             "routing.weights[" + std::to_string(k) + "] (row 1"},
            {"both",
             [&](ForwardOptions& fo) {
               fo.router_logits = GateLogits(*c);
               fo.router_logits_experts = E;
             },
             "routing, router_logits"},
            {"logits too narrow",
             [&](ForwardOptions& fo) {
               fo.routing_slots = 0;
               fo.router_logits.assign(c->tokens * (E - 1), 0.0f);
               fo.router_logits_experts = E - 1;
             },
             "router_logits.shape[1]: wrong width"},
            {"non-finite logits",
             [&](ForwardOptions& fo) {
               logits_of(fo, *c);
               fo.router_logits[2 * E + 3] = INFINITY;
             },
             "router_logits.data: non-finite value at [2, 3]"},
            {"logits in f16",
             [&](ForwardOptions& fo) {
               logits_of(fo, *c);
               fo.router_logits_dtype = moe::v1::F16;
             },
             "router_logits.dtype"},
            {"unknown shared mode",
             [&](ForwardOptions& fo) {
               fo.shared = static_cast<moe::v1::SharedMode>(7);
             },
             "shared: unknown SharedMode 7"}});
  CheckBad("expert_choice", {{"routing on expert choice",
                              [&](ForwardOptions& fo) {
                                fo.router_logits.clear();
                                fo.router_logits_experts = 0;
                                fo.routing_slots = 1;
                                fo.routing_expert_ids = {0};
                                fo.routing_weights = {1.0f};
                              },
                              "routing: layer"}});
  auto hashed = Case("deepseek_v4_hash");
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  CheckBad(
      "deepseek_v4_hash",
      {{"logits on a hash layer",
        [&](ForwardOptions& fo) { logits_of(fo, *hashed); }, "is hash-routed"},
       {"routing tokens wrong",
        [&](ForwardOptions& fo) {
          fo.routing_expert_ids.resize(fo.routing_expert_ids.size() - k);
        },
        "routing.expert_ids:"}});
}

}  // namespace
}  // namespace moe

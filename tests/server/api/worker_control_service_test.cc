// The worker group's gRPC edge: what it encodes for a member (assignments
// and placements, the group's decisions plus the edge's settings), the
// checks at the top of every call, and a Join stream's messages handed to
// the group.
#include "server/api/worker_control_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/group/serve_pool.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<ExpertPlacement> TwoWorkerPlacement() {
  auto p = std::make_shared<ExpertPlacement>();
  p->redundant = 2;
  p->layers[3].workers = {{0, 1, 2}, {3, 0, 4}};
  p->layers[5].workers = {{4, 3, 2}, {1, 0, 2}};
  return p;
}

TEST(WorkerControlEncodeTest, AssignmentCarriesTheGroupsDecisionsAndTheEdges) {
  GroupAssignment in{.generation = 7,
                     .rank = 1,
                     .world_size = 2,
                     .expert_begin = 4,
                     .expert_end = 8,
                     .placement_epoch = 3,
                     .placement = TwoWorkerPlacement(),
                     .heartbeat_interval = milliseconds(250),
                     .store_token = "tok"};
  WorkerControlOptions o;
  o.model.set_checkpoint_dir("/models/x");
  o.collective_timeout = milliseconds(9000);
  o.connect_timeout = milliseconds(1500);
  o.max_batch_tokens = 96;
  const moe::v1::RouterMessage msg = EncodeAssignment(in, o);
  ASSERT_TRUE(msg.has_assignment());
  const moe::v1::Assignment& a = msg.assignment();
  EXPECT_EQ(a.generation(), 7u);
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(a.world_size(), 2);
  EXPECT_EQ(a.expert_begin(), 4);
  EXPECT_EQ(a.expert_end(), 8);
  EXPECT_EQ(a.placement_epoch(), 3u);
  EXPECT_EQ(a.heartbeat_interval_ms(), 250);
  EXPECT_EQ(a.store_token(), "tok");
  EXPECT_EQ(a.model().checkpoint_dir(), "/models/x");
  EXPECT_EQ(a.collective_timeout_ms(), 9000);
  EXPECT_EQ(a.connect_timeout_ms(), 1500);
  EXPECT_EQ(a.max_batch_tokens(), 96);
  EXPECT_EQ(a.redundant_experts(), 2);
  // Rank 1's slots of every layer, in layer order.
  ASSERT_EQ(a.layer_slots_size(), 2);
  EXPECT_EQ(a.layer_slots(0).layer(), 3);
  EXPECT_EQ(std::vector<int32_t>(a.layer_slots(0).experts().begin(),
                                 a.layer_slots(0).experts().end()),
            (std::vector<int32_t>{3, 0, 4}));
  EXPECT_EQ(a.layer_slots(1).layer(), 5);
  EXPECT_EQ(std::vector<int32_t>(a.layer_slots(1).experts().begin(),
                                 a.layer_slots(1).experts().end()),
            (std::vector<int32_t>{1, 0, 2}));
  // Without a placement: the even split alone.
  in.placement = nullptr;
  const moe::v1::Assignment plain = EncodeAssignment(in, o).assignment();
  EXPECT_EQ(plain.layer_slots_size(), 0);
  EXPECT_EQ(plain.redundant_experts(), 0);
}

TEST(WorkerControlEncodeTest, PlacementNamesItsRanksSlots) {
  const moe::v1::RouterMessage msg =
      EncodePlacement({.generation = 4,
                       .rank = 0,
                       .epoch = 2,
                       .placement = TwoWorkerPlacement()});
  ASSERT_TRUE(msg.has_placement());
  const moe::v1::PlacementUpdate& u = msg.placement();
  EXPECT_EQ(u.generation(), 4u);
  EXPECT_EQ(u.epoch(), 2u);
  EXPECT_EQ(u.redundant_experts(), 2);
  ASSERT_EQ(u.layer_slots_size(), 2);
  EXPECT_EQ(std::vector<int32_t>(u.layer_slots(1).experts().begin(),
                                 u.layer_slots(1).experts().end()),
            (std::vector<int32_t>{4, 3, 2}));
}

// A group of one worker behind the service on loopback.
class WorkerControlServiceTest : public ::testing::Test {
 protected:
  void Start(const WorkerAuth* auth) {
    WorkerPoolOptions po;
    po.world_size = 1;
    po.num_experts = 4;
    po.heartbeat_interval = milliseconds(60000);
    WorkerControlOptions wo;
    wo.auth = auth;
    wo.max_batch_tokens = 32;
    testing::ServePool(po, wo, &served_);
  }
  void TearDown() override {
    served_.pool->Shutdown();
    served_.server->Shutdown(std::chrono::system_clock::now() +
                             std::chrono::seconds(1));
  }
  static void Authorize(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }
  // Registers, reads the Assignment, says Ready; the stream's status once
  // it is closed.
  grpc::Status JoinAndReady(const std::string& token,
                            moe::v1::Assignment* assignment) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    auto stream = served_.stub->Join(&ctx);
    moe::v1::WorkerMessage m;
    m.mutable_register_()->set_host("h");
    m.mutable_register_()->set_device("cpu");
    stream->Write(m);
    moe::v1::RouterMessage r;
    if (stream->Read(&r) && r.has_assignment()) {
      *assignment = r.assignment();
      moe::v1::WorkerMessage ready;
      ready.mutable_ready()->set_generation(r.assignment().generation());
      stream->Write(ready);
      EXPECT_TRUE(testing::WaitFor([&] { return served_.pool->state().ready; },
                                   milliseconds(10000)));
    }
    stream->WritesDone();
    while (stream->Read(&r)) {
    }
    return stream->Finish();
  }

  testing::ServedPool served_;
};

TEST_F(WorkerControlServiceTest, JoinHandsTheStreamToTheGroup) {
  Start(nullptr);
  moe::v1::Assignment a;
  EXPECT_TRUE(JoinAndReady("", &a).ok());
  EXPECT_EQ(a.world_size(), 1);
  EXPECT_EQ(a.expert_end(), 4);
  EXPECT_EQ(a.max_batch_tokens(), 32) << "the edge's settings";
  // The stream's end reached the group.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return served_.pool->state().connected == 0 &&
               !served_.pool->state().ready;
      },
      milliseconds(10000)));
}

TEST_F(WorkerControlServiceTest, JoinMustStartWithRegister) {
  Start(nullptr);
  grpc::ClientContext ctx;
  auto stream = served_.stub->Join(&ctx);
  moe::v1::WorkerMessage m;
  m.mutable_heartbeat();
  stream->Write(m);
  stream->WritesDone();
  moe::v1::RouterMessage r;
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(served_.pool->state().connected, 0);
}

TEST_F(WorkerControlServiceTest, EveryCallIsCheckedAgainstTheTokens) {
  WorkerAuth auth({"s3cret"});
  Start(&auth);
  moe::v1::Assignment a;
  EXPECT_EQ(JoinAndReady("", &a).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(JoinAndReady("wrong", &a).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(served_.pool->state().connected, 0);
  {
    grpc::ClientContext ctx;
    moe::v1::StoreSetRequest req;
    moe::v1::StoreSetResponse resp;
    EXPECT_EQ(served_.stub->StoreSet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    moe::v1::StoreGetRequest req;
    req.add_keys("0");
    moe::v1::StoreGetResponse resp;
    EXPECT_EQ(served_.stub->StoreGet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(JoinAndReady("s3cret", &a).ok());
  EXPECT_EQ(a.world_size(), 1);
}

}  // namespace
}  // namespace moe

// The router's parts' options from RouterOptions: each rule that is not a
// plain copy (the message limit, the connect timeout, the dtype the workers
// load, P = 0 loading every expert), and the copies field by field.
#include "server/router_part_options.h"

#include <climits>
#include <memory>

#include "gtest/gtest.h"

namespace moe {
namespace {

using std::chrono::milliseconds;

RouterOptions Options() {
  RouterFlags f;
  f.synthetic = true;
  f.listen = "127.0.0.1:50051";
  auto o = RouterOptions::FromFlags(f);
  EXPECT_TRUE(o.ok()) << o.status();
  return *o;
}

ModelInfo Info(int64_t hidden, int64_t top_k, int64_t experts) {
  ModelInfo info;
  info.layer.hidden = hidden;
  info.layer.top_k = top_k;
  info.layer.num_experts = experts;
  return info;
}

TEST(RouterPartOptions, MessageLimitHoldsTheLargestStepOrTheFlag) {
  RouterOptions o = Options();
  o.max_batch_tokens = 4096;
  o.max_message_bytes = 0;
  // Rows of fp32, per token the larger of k ids or E scores at 8 bytes,
  // and 16 MiB of margin.
  EXPECT_EQ(MessageLimitFor(o, Info(2048, 6, 64)),
            4096 * (2048 * 4 + 64 * 8) + (16 << 20));
  EXPECT_EQ(MessageLimitFor(o, Info(64, 8, 4)),
            4096 * (64 * 4 + 8 * 8) + (16 << 20));
  o.max_message_bytes = 123456;
  EXPECT_EQ(MessageLimitFor(o, Info(2048, 6, 64)), 123456);
  o.max_message_bytes = 0;
  o.max_batch_tokens = int64_t{1} << 30;  // beyond what gRPC takes
  EXPECT_EQ(MessageLimitFor(o, Info(7168, 8, 256)), INT32_MAX);
}

// Requests may be a bounded multiple of the derived limit, so that one with
// too many tokens is read and refused by its token count; an explicit
// --max-message-bytes stays exact.
TEST(RouterPartOptions, RequestLimitIsABoundedMultipleOfTheDerivedOne) {
  RouterOptions o = Options();
  o.max_batch_tokens = 4096;
  o.max_message_bytes = 0;
  const int derived = MessageLimitFor(o, Info(64, 2, 8));
  EXPECT_EQ(derived, 18087936);  // gRPC names 18087936 in its "vs." refusal
  EXPECT_EQ(RequestLimitFor(o, Info(64, 2, 8)),
            int64_t{kOversizedRequestFactor} * derived);
  o.max_message_bytes = 123456;
  EXPECT_EQ(RequestLimitFor(o, Info(64, 2, 8)), 123456);
  o.max_message_bytes = 0;
  o.max_batch_tokens = int64_t{1} << 20;
  EXPECT_EQ(RequestLimitFor(o, Info(7168, 8, 256)), INT32_MAX);
}

TEST(RouterPartOptions, WorkersLoadTheResolvedDtypeAndConnectWithinAStep) {
  RouterOptions o = Options();
  o.step_timeout = milliseconds(10000);
  o.max_batch_tokens = 777;
  const WorkerAuth auth({"secret"});
  WorkerControlOptions w = ControlOptionsFor(o, WeightDType::kBF16, &auth);
  EXPECT_EQ(w.model.weight_dtype(), "bf16");
  EXPECT_EQ(w.collective_timeout, milliseconds(10000));
  EXPECT_EQ(w.connect_timeout, milliseconds(3000));
  EXPECT_EQ(w.max_batch_tokens, 777);
  EXPECT_EQ(w.auth, &auth);
  o.step_timeout = milliseconds(1200);  // a short step: one attempt fits
  w = ControlOptionsFor(o, WeightDType::kMXFP4, nullptr);
  EXPECT_EQ(w.model.weight_dtype(), "mxfp4");
  EXPECT_EQ(w.connect_timeout, milliseconds(1200));
  EXPECT_EQ(w.auth, nullptr);
}

TEST(RouterPartOptions, PoolModelServersAndBatcherCopyTheirFlags) {
  RouterOptions o = Options();
  o.num_workers = 3;
  o.heartbeat_interval_ms = 250;
  o.heartbeat_misses = 7;
  o.regroup_after_ms = 900;
  o.hold_while_regrouping_ms = 40;
  auto placement = std::make_shared<const ExpertPlacement>();
  const WorkerPoolOptions p = PoolOptionsFor(o, 60, placement);
  EXPECT_EQ(p.world_size, 3);
  EXPECT_EQ(p.num_experts, 60);
  EXPECT_EQ(p.placement, placement);
  EXPECT_EQ(p.heartbeat_interval, milliseconds(250));
  EXPECT_EQ(p.heartbeat_misses, 7);
  EXPECT_EQ(p.regroup_after, milliseconds(900));
  EXPECT_EQ(p.hold_while_regrouping, milliseconds(40));

  o.threads = 5;
  o.device = "cpu";
  o.max_batch_tokens = 321;
  EXPECT_FALSE(ModelOptionsFor(o).all_experts);  // the workers hold them
  EXPECT_EQ(ModelOptionsFor(o).threads, 5);
  EXPECT_EQ(ModelOptionsFor(o).max_tokens, 321);
  o.num_workers = 0;
  EXPECT_TRUE(ModelOptionsFor(o).all_experts);

  o.worker_listen = "127.0.0.1:0";
  o.health_listen = "127.0.0.1:1";
  o.max_concurrent_streams = 9;
  const RouterServers::Options s = ServersOptionsFor(o);
  EXPECT_EQ(s.listen, "127.0.0.1:50051");
  EXPECT_EQ(s.worker_listen, "127.0.0.1:0");
  EXPECT_EQ(s.health_listen, "127.0.0.1:1");
  EXPECT_EQ(s.max_concurrent_streams, 9);

  o.max_queue_tokens = 1000;
  o.bf16_results = false;
  const Batcher::Options b = BatcherOptionsFor(o);
  EXPECT_EQ(b.max_batch_tokens, 321);
  EXPECT_EQ(b.max_queue_tokens, 1000);
  EXPECT_EQ(b.window, o.batch_window);
  EXPECT_EQ(b.step_timeout, o.step_timeout);
  EXPECT_FALSE(b.bf16_steps);
}

}  // namespace
}  // namespace moe

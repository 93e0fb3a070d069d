// RouterOptions::FromFlags: every bad flag value is refused with an error
// naming the flag; good values are resolved.
#include "server/router_options.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

// Loopback: worker registration may stay open.
RouterFlags Good() {
  RouterFlags f;
  f.synthetic = true;
  f.listen = "127.0.0.1:50051";
  return f;
}

struct BadCase {
  std::string name;
  std::function<void(RouterFlags&)> edit;
  std::string message;  // a part of the expected error
};

TEST(RouterOptionsTest, DefaultsWithSyntheticAreValid) {
  auto o = RouterOptions::FromFlags(Good());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->num_workers, 2);
  EXPECT_EQ(o->max_request_tokens, 4096);  // 0: --max-batch-tokens
  EXPECT_GE(o->threads, 1);                // 0: all cores
  EXPECT_EQ(o->step_timeout.count(), 10000);
  EXPECT_EQ(o->batch_window.count(), 500);
  EXPECT_EQ(o->drain_wait.count(), 30000);
}

TEST(RouterOptionsTest, OpenWorkerRegistrationOnlyOnLoopback) {
  RouterFlags f = Good();
  f.listen = "0.0.0.0:50051";  // the flag's default
  auto o = RouterOptions::FromFlags(f);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* flag :
       {"--listen", "--worker-token-file", "--tls-ca", "--insecure-workers"}) {
    EXPECT_NE(o.status().message().find(flag), std::string::npos)
        << flag << ": " << o.status().message();
  }
  // Any of these closes (or knowingly opens) it.
  RouterFlags token = f;
  token.worker_token_file = "worker-token";
  EXPECT_TRUE(RouterOptions::FromFlags(token).ok());
  RouterFlags insecure = f;
  insecure.insecure_workers = true;
  EXPECT_TRUE(RouterOptions::FromFlags(insecure).ok());
  RouterFlags no_workers = f;
  no_workers.num_workers = 0;
  EXPECT_TRUE(RouterOptions::FromFlags(no_workers).ok());
  // A worker port of its own on loopback, the public API on all addresses.
  RouterFlags own_port = f;
  own_port.worker_listen = "[::1]:50053";
  EXPECT_TRUE(RouterOptions::FromFlags(own_port).ok());
  own_port.worker_listen = "[::]:50053";
  o = RouterOptions::FromFlags(own_port);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--worker-listen"), std::string::npos);
}

TEST(RouterOptionsTest, ModelWinsOverSynthetic) {
  RouterFlags f = Good();
  f.model = "/some/dir";
  auto o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->location.checkpoint_dir, "/some/dir");
}

TEST(RouterOptionsTest, WeightDTypeDefaultsToAutoAndTakesFp8) {
  RouterFlags f = Good();
  auto o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dtype, WeightDType::kAuto);
  f.weight_dtype = "fp8";
  o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dtype, WeightDType::kFP8);
}

TEST(RouterOptionsTest, DispatchDTypeTakesBf16AndFp8) {
  RouterFlags f = Good();
  auto o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dispatch, DispatchDType::kRowType);
  EXPECT_TRUE(o->bf16_results);
  f.dispatch_dtype = "f32";
  o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dispatch, DispatchDType::kRowType);
  EXPECT_FALSE(o->bf16_results);
  f.dispatch_dtype = "bf16";
  o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dispatch, DispatchDType::kBf16);
  EXPECT_TRUE(o->bf16_results);
  f.dispatch_dtype = "fp8";
  o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->dispatch, DispatchDType::kFp8);
  EXPECT_TRUE(o->bf16_results);
}

TEST(RouterOptionsTest, EdgeValuesAreValid) {
  RouterFlags f = Good();
  f.num_workers = 0;
  f.batch_window_us = 0;
  f.max_request_tokens = f.max_batch_tokens;
  f.device = "cuda:1";
  f.weight_dtype = "bf16";
  f.tls = {"cert.pem", "key.pem", "ca.pem"};
  f.worker_listen = "0.0.0.0:50052";
  f.max_queue_tokens = f.max_batch_tokens;
  f.max_stream_inflight = 1;
  EXPECT_TRUE(RouterOptions::FromFlags(f).ok());
}

TEST(RouterOptionsTest, QueueBoundDefaultsToTheStepsInFlightAndTwoMore) {
  RouterFlags f = Good();
  f.max_inflight_steps = 3;
  auto o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_queue_tokens, 5 * o->max_batch_tokens);
  EXPECT_EQ(o->max_stream_inflight, 64);
  // A lone stream keeps every step in flight and the next one fed.
  EXPECT_EQ(o->stream_max_queued_tokens, 4 * o->max_batch_tokens);
}

TEST(RouterOptionsTest, StreamHoldsHalfOfALargeQueueAndNeverMoreThanIt) {
  RouterFlags f = Good();
  f.max_queue_tokens = 32 * f.max_batch_tokens;
  auto o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stream_max_queued_tokens, 16 * o->max_batch_tokens);
  f.max_queue_tokens = f.max_batch_tokens;
  o = RouterOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stream_max_queued_tokens, f.max_batch_tokens);
}

TEST(RouterOptionsTest, BadValuesNameTheFlag) {
  const std::vector<BadCase> cases = {
      {"no model", [](RouterFlags& f) { f.synthetic = false; },
       "give --model DIR or --synthetic"},
      {"synthetic", [](RouterFlags& f) { f.synthetic_args.top_k = 99; }, ""},
      {"redundant not a multiple",
       [](RouterFlags& f) { f.redundant_experts = 3; },
       "--redundant-experts must be a multiple of --num-workers 2"},
      {"redundant negative", [](RouterFlags& f) { f.redundant_experts = -2; },
       "--redundant-experts"},
      {"redundant without workers",
       [](RouterFlags& f) {
         f.num_workers = 0;
         f.redundant_experts = 2;
       },
       "need --num-workers > 0"},
      {"placement and load",
       [](RouterFlags& f) {
         f.expert_placement = "p.json";
         f.expert_load = "l.json";
       },
       "give one of them"},
      {"dispatch dtype", [](RouterFlags& f) { f.dispatch_dtype = "e4m3"; },
       "--dispatch-dtype must be auto, f32, bf16 or fp8, got 'e4m3'"},
      {"dtype", [](RouterFlags& f) { f.weight_dtype = "f16"; },
       "--weight-dtype must be auto, f32, bf16, fp8, mxfp4 or nvfp4, got "
       "'f16'"},
      {"device", [](RouterFlags& f) { f.device = "tpu"; },
       "--device must be cpu, cuda or cuda:N, got 'tpu'"},
      {"device ordinal", [](RouterFlags& f) { f.device = "cuda:-1"; },
       "--device must be"},
      {"workers", [](RouterFlags& f) { f.num_workers = -1; },
       "--num-workers must be between 0 and 1024, got -1"},
      {"too many workers", [](RouterFlags& f) { f.num_workers = 1025; },
       "--num-workers"},
      {"timeout", [](RouterFlags& f) { f.step_timeout_ms = 0; },
       "--step-timeout-ms must be >= 1, got 0"},
      {"heartbeat", [](RouterFlags& f) { f.heartbeat_interval_ms = 0; },
       "--heartbeat-interval-ms must be between 10 and 60000, got 0"},
      {"misses", [](RouterFlags& f) { f.heartbeat_misses = 1; },
       "--heartbeat-misses must be between 2 and 1000, got 1"},
      {"regroup", [](RouterFlags& f) { f.regroup_after_ms = -1; },
       "--regroup-after-ms must be between 0 and 3600000, got -1"},
      {"hold", [](RouterFlags& f) { f.hold_while_regrouping_ms = -5; },
       "--hold-while-regrouping-ms must be between 0 and 600000, got -5"},
      {"batch", [](RouterFlags& f) { f.max_batch_tokens = 0; },
       "--max-batch-tokens must be >= 1, got 0"},
      {"request > batch", [](RouterFlags& f) { f.max_request_tokens = 5000; },
       "--max-request-tokens must be"},
      {"request < 0", [](RouterFlags& f) { f.max_request_tokens = -1; },
       "--max-request-tokens must be"},
      {"queue < request",
       [](RouterFlags& f) { f.max_queue_tokens = f.max_batch_tokens - 1; },
       "--max-queue-tokens must be 0 ((--max-inflight-steps + 2) x "
       "--max-batch-tokens) or at least"},
      {"queue < 0", [](RouterFlags& f) { f.max_queue_tokens = -1; },
       "--max-queue-tokens must be"},
      {"stream inflight", [](RouterFlags& f) { f.max_stream_inflight = 0; },
       "--max-stream-inflight must be >= 1, got 0"},
      {"window", [](RouterFlags& f) { f.batch_window_us = -1; },
       "--batch-window-us must be >= 0, got -1"},
      {"inflight", [](RouterFlags& f) { f.max_inflight_steps = 0; },
       "--max-inflight-steps must be >= 1, got 0"},
      {"threads", [](RouterFlags& f) { f.threads = -2; },
       "--threads must be >= 0, got -2"},
      {"streams", [](RouterFlags& f) { f.max_concurrent_streams = 0; },
       "--max-concurrent-streams must be >= 1"},
      {"message bytes", [](RouterFlags& f) { f.max_message_bytes = -1; },
       "--max-message-bytes must be >= 0"},
      {"listen", [](RouterFlags& f) { f.listen = ""; }, "--listen"},
      {"cert without key", [](RouterFlags& f) { f.tls.cert = "c.pem"; },
       "--tls-cert needs --tls-key"},
      {"key without cert", [](RouterFlags& f) { f.tls.key = "k.pem"; },
       "--tls-key needs --tls-cert"},
      {"ca without cert", [](RouterFlags& f) { f.tls.ca = "ca.pem"; },
       "--tls-ca"},
      {"ca without worker listen",
       [](RouterFlags& f) {
         f.tls = {"c.pem", "k.pem", "ca.pem"};
       },
       "--tls-ca (mutual TLS with the workers) needs --worker-listen"},
      {"drain", [](RouterFlags& f) { f.drain_timeout = absl::Seconds(-1); },
       "--drain-timeout must be >= 0"},
  };
  for (const BadCase& c : cases) {
    RouterFlags f = Good();
    c.edit(f);
    auto o = RouterOptions::FromFlags(f);
    ASSERT_FALSE(o.ok()) << c.name;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(o.status().message().find(c.message), std::string::npos)
        << c.name << ": " << o.status().message();
  }
}

}  // namespace
}  // namespace moe

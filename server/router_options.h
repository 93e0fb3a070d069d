// moe-router's options: the flags' raw values (RouterFlags, read in
// router_main.cc, where the flags are defined) and the checked, resolved
// options the router is built from (RouterOptions).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/model_location.h"
#include "core/serving_defaults.h"
#include "core/synthetic_model.h"
#include "engine/ep_plan.h"
#include "engine/layer_weights.h"
#include "proto/credentials.h"

namespace moe {

// Holds the flags as given; its defaults are the flags' defaults.
struct RouterFlags {
  std::string model;
  bool synthetic = false;
  SyntheticArgs synthetic_args{.hidden = 1024,
                               .inter = 512,
                               .experts = 32,
                               .top_k = 4,
                               .shared_inter = 0,
                               .layers = 1,
                               .seed = 1,
                               .options_json = ""};
  std::string weight_dtype = "auto";
  std::string listen = "0.0.0.0:50051";
  std::string port_file;
  int num_workers = 2;
  // Expert-parallel load balancing (engine/placement.h): R redundant expert
  // slots, placed by EPLB from --expert-load (GetExpertStats JSON) or pinned
  // by --expert-placement.
  int64_t redundant_experts = 0;
  std::string expert_load;
  std::string expert_placement;
  int64_t rebalance_every_steps = 0;  // live rebalancing; 0: only on request
  int64_t step_timeout_ms = kDefaultStepTimeoutMs;
  int64_t heartbeat_interval_ms = 500;
  int heartbeat_misses = 4;
  int64_t regroup_after_ms = 5000;
  int64_t hold_while_regrouping_ms = 0;
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;
  int64_t max_request_tokens = 0;
  int64_t batch_window_us = 500;
  int max_inflight_steps = 2;
  int64_t max_queue_tokens = 0;
  int max_stream_inflight = 64;
  // "auto": a step whose requests are all bf16 in and out, in a layer
  // without shared experts, gets the workers' results in bf16; "f32":
  // results always in fp32. Either way the client's answer is the fp32
  // answer rounded once. "bf16", "fp8": as auto, and the rows cross the
  // workers' dispatch all-to-all as bf16, or as FP8 rows (core/fp8_rows.h).
  std::string dispatch_dtype = "auto";
  // Steps of at most this many tokens are direct (docs/architecture.md,
  // "Direct steps"): each worker gets the rows its experts need from the
  // router and returns their outputs, which the router sums; no all-to-all
  // between workers. 0: every step takes the all-to-alls. Only with 2 or
  // more workers (one worker exchanges nothing anyway).
  int64_t direct_step_tokens = 64;
  int threads = 0;
  std::string device = "cpu";
  TlsFiles tls;
  std::string auth_token_file;
  std::string worker_listen;
  std::string worker_port_file;
  std::string health_listen;
  std::string health_port_file;
  int max_concurrent_streams = 1024;
  int64_t max_message_bytes = 0;
  std::string metrics_listen;
  std::string metrics_port_file;
  std::string worker_token_file;
  bool insecure_workers = false;
  absl::Duration drain_timeout = absl::Seconds(30);
};

// Holds the checked options: the flags as given, with the defaults that depend
// on others resolved in place (max_request_tokens, max_queue_tokens:
// (max_inflight_steps + 2) x max_batch_tokens when 0, threads: all cores when
// 0) and the typed forms of the rest.
struct RouterOptions : RouterFlags {
  ModelLocation location;
  WeightDType dtype = WeightDType::kAuto;  // resolved by RouterModel::Load
  DispatchDType dispatch = DispatchDType::kRowType;  // of dispatch_dtype
  bool bf16_results = true;  // dispatch_dtype is not "f32"
  std::chrono::milliseconds step_timeout{0};
  std::chrono::microseconds batch_window{0};
  // Bounds how long a drain (SIGTERM) waits for requests in flight.
  std::chrono::milliseconds drain_wait{30000};
  // Bounds the tokens one ForwardStream may hold unanswered before it is no
  // longer read: half the queue, so that one stream cannot fill it for
  // everyone, but at least a step per step in flight and one more, so that a
  // lone stream of full-size requests keeps the pipeline fed.
  int64_t stream_max_queued_tokens = 0;

  // Returns INVALID_ARGUMENT naming the first bad flag, the accepted values and
  // the value given. Reads no files: --tls-* and --auth-token-file are opened
  // when the router starts. Refuses open worker registration (no
  // --worker-token-file, no --tls-ca) on an address other than loopback unless
  // --insecure-workers is given.
  static absl::StatusOr<RouterOptions> FromFlags(const RouterFlags& flags);
};

}  // namespace moe

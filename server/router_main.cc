// moe-router: the front end. Validates and batches requests, routes every
// token in fp32, plans the dispatch, drives the expert workers (or computes
// the experts itself with --num-workers 0), adds the shared experts.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "core/family_file.h"
#include "core/flag_help.h"
#include "core/logging.h"
#include "core/service_process.h"
#include "core/serving_defaults.h"
#include "proto/grpc_log.h"
#include "server/router.h"
#include "server/router_options.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
ABSL_FLAG(std::vector<std::string>, family_file, {},
          "family document (JSON) to add before --model is read; repeat "
          "the flag or separate files by commas (see --print-family)");
ABSL_FLAG(std::string, print_family, "",
          "print the family document of this model_type (built in or "
          "added by --family-file) and exit");
ABSL_FLAG(bool, synthetic, false, "serve the synthetic model");
ABSL_FLAG(int64_t, hidden, 1024, "synthetic: hidden size H");
ABSL_FLAG(int64_t, inter, 512, "synthetic: expert intermediate size I");
ABSL_FLAG(int64_t, experts, 32, "synthetic: routed experts E");
ABSL_FLAG(int64_t, top_k, 4, "synthetic: experts per token k");
ABSL_FLAG(int64_t, shared_inter, 0, "synthetic: shared expert size (0: none)");
ABSL_FLAG(int64_t, layers, 1, "synthetic: MoE layers, numbered from 0");
ABSL_FLAG(uint64_t, seed, 1, "synthetic: weight seed");
ABSL_FLAG(std::string, moe_options, "",
          "synthetic: further layer options as JSON, e.g. "
          "{\"score_func\":\"sigmoid\",\"n_groups\":8,\"topk_groups\":4}");
ABSL_FLAG(double, synthetic_zipf, 0,
          "synthetic: skew expert popularity, gate row e scaled by "
          "(e+1)^-S (0: even)");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "expert weights: auto (the checkpoint's own storage: MXFP4 stays "
          "MXFP4, NVFP4 stays NVFP4, FP8 stays FP8, bf16 stays bf16, else "
          "fp32; fp32 for --synthetic), f32, bf16, fp8 (e4m3 with 128x128 "
          "block scales; on a GPU block-scaled FP8 matmuls on sm_90, "
          "dequantised to bf16 elsewhere), mxfp4 (routed experts as E2M1 "
          "with an E8M0 scale per 32 inputs; on a GPU dequantised to bf16) "
          "or nvfp4 (routed experts as E2M1 with an E4M3 scale per 16 inputs "
          "and an fp32 scale per tensor; on a GPU dequantised to bf16)");
ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "gRPC address (public API)");
ABSL_FLAG(std::string, port_file, "",
          "write the bound port here once serving (for --listen host:0)");
ABSL_FLAG(int, num_workers, 2, "expert workers P; 0 = experts in-process");
ABSL_FLAG(int, group_size, 0,
          "a LeaderWorkerSet group's size, this router included (give "
          "$(LWS_GROUP_SIZE)): sets --num-workers to N - 1, so that the "
          "group's size is the one setting; 0 = use --num-workers");
ABSL_FLAG(int64_t, redundant_experts, 0,
          "R extra expert slots (a multiple of --num-workers) for replicas "
          "of the hottest experts, placed with EPLB");
ABSL_FLAG(std::string, expert_load, "",
          "per-expert load to place experts by: the JSON of "
          "`moe-cli stats --save` (default: even load)");
ABSL_FLAG(std::string, expert_placement, "",
          "pin the placement: JSON {\"redundant_experts\": R, \"layers\": "
          "{\"<layer>\": [[experts of worker 0's slots], ...]}}");
ABSL_FLAG(int64_t, rebalance_every_steps, 0,
          "live rebalancing: a new placement from the load of the last K "
          "steps, loaded by the workers in the background (0: only on a "
          "Rebalance call)");
ABSL_FLAG(int64_t, step_timeout_ms, moe::kDefaultStepTimeoutMs,
          "deadline of one step on the workers, collectives included");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 500,
          "workers send a heartbeat this often, also while a step runs");
ABSL_FLAG(int, heartbeat_misses, 4,
          "a worker silent for this many heartbeat intervals is stalled: "
          "the router reports NOT_SERVING and fails its steps in flight "
          "until it answers again");
ABSL_FLAG(int64_t, regroup_after_ms, 5000,
          "once a full group has formed, a worker gone this long no longer "
          "blocks service: the workers left form a smaller group (experts "
          "re-split among them), which grows back when workers return");
ABSL_FLAG(int64_t, hold_while_regrouping_ms, 0,
          "requests that find the worker group not ready are queued, and "
          "their step waits this long for it (its step timeout starts "
          "after) instead of failing UNAVAILABLE at once; 0: fail at once");
ABSL_FLAG(int64_t, max_batch_tokens, moe::kDefaultMaxBatchTokens,
          "tokens per step at most");
ABSL_FLAG(int64_t, max_request_tokens, 0,
          "tokens per request at most (0: --max-batch-tokens); a larger "
          "request is refused with RESOURCE_EXHAUSTED naming this flag");
ABSL_FLAG(int64_t, batch_window_us, 500,
          "how long the oldest queued request waits for others to join its "
          "step while other steps are in flight; 0 = no wait (requests "
          "already queued still share a step)");
ABSL_FLAG(int, max_inflight_steps, 2, "steps in flight at once (pipelining)");
ABSL_FLAG(int64_t, max_queue_tokens, 0,
          "tokens queued at most; the excess is refused at once with "
          "RESOURCE_EXHAUSTED (0: (--max-inflight-steps + 2) x "
          "--max-batch-tokens)");
ABSL_FLAG(int64_t, direct_step_tokens, 64,
          "steps of at most this many tokens skip the workers' all-to-alls: "
          "the router sends each worker the rows its experts need and sums "
          "their outputs itself, in slot order (the same bits); 0: always "
          "the all-to-alls (with 2 or more workers)");
ABSL_FLAG(std::string, dispatch_dtype, "auto",
          "auto: a step whose requests are all bf16 in and out, in a layer "
          "without shared experts, gets the workers' results in bf16 (half "
          "the bytes; the same bits as rounding the fp32 answer); f32: "
          "results always in fp32; bf16, fp8: as auto, and rows cross the "
          "workers' dispatch all-to-all as bf16, or as e4m3 with one fp32 "
          "scale per 128 channels (CPU workers; nothing crosses with "
          "--num-workers 0 or 1)");
ABSL_FLAG(int, max_stream_inflight, 64,
          "requests of one ForwardStream read and not yet written back; "
          "beyond it the stream is not read until the client drains");
ABSL_FLAG(int, threads, 0, "router compute threads (0: all cores)");
ABSL_FLAG(std::string, device, "cpu",
          "router compute device for the gate and the shared experts (and "
          "every expert with --num-workers 0): cpu, cuda or cuda:N");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate: TLS on the public API");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA: workers must present a certificate it signed (mutual TLS "
          "on --worker-listen)");
ABSL_FLAG(std::string, auth_token_file, "",
          "bearer tokens, one per line: required on the public API (health "
          "is exempt)");
ABSL_FLAG(std::string, worker_token_file, "",
          "bearer tokens, one per line: every worker must present one "
          "(moe-worker --worker-token-file) to register or use the "
          "rendezvous store");
ABSL_FLAG(bool, insecure_workers, false,
          "allow open worker registration (no --worker-token-file, no "
          "--tls-ca) on an address other than loopback");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "after SIGTERM/SIGINT: how long requests in flight may take to "
          "finish before the router stops anyway");
ABSL_FLAG(std::string, worker_listen, "",
          "separate address for worker registration (needed with --tls-ca); "
          "empty: the --listen port");
ABSL_FLAG(std::string, worker_port_file, "",
          "write the bound worker port here");
ABSL_FLAG(std::string, health_listen, "",
          "plaintext address serving only grpc.health.v1, for probes");
ABSL_FLAG(std::string, health_port_file, "",
          "write the bound health port here");
ABSL_FLAG(int, max_concurrent_streams, 1024,
          "concurrent gRPC streams per client connection");
ABSL_FLAG(int64_t, max_message_bytes, 0,
          "gRPC message size limit (0: fits --max-batch-tokens, and requests "
          "on the public port may take 4x that, so that one with too many "
          "tokens is refused naming --max-request-tokens; beyond 4x gRPC "
          "refuses it by size)");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics address, e.g. 0.0.0.0:9090 (empty: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the bound metrics port here (for --metrics-listen host:0)");

namespace moe {
namespace {

RouterFlags ReadFlags() {
  RouterFlags f;
  f.model = absl::GetFlag(FLAGS_model);
  f.synthetic = absl::GetFlag(FLAGS_synthetic);
  SyntheticArgs& a = f.synthetic_args;
  a.hidden = absl::GetFlag(FLAGS_hidden);
  a.inter = absl::GetFlag(FLAGS_inter);
  a.experts = absl::GetFlag(FLAGS_experts);
  a.top_k = absl::GetFlag(FLAGS_top_k);
  a.shared_inter = absl::GetFlag(FLAGS_shared_inter);
  a.layers = absl::GetFlag(FLAGS_layers);
  a.seed = absl::GetFlag(FLAGS_seed);
  a.options_json = absl::GetFlag(FLAGS_moe_options);
  a.zipf = absl::GetFlag(FLAGS_synthetic_zipf);
  f.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  f.listen = absl::GetFlag(FLAGS_listen);
  f.port_file = absl::GetFlag(FLAGS_port_file);
  f.num_workers = absl::GetFlag(FLAGS_num_workers);
  if (const int group = absl::GetFlag(FLAGS_group_size); group != 0) {
    // 0 workers is not a group; below 1 stays invalid for the check.
    f.num_workers = group >= 2 ? group - 1 : -1;
  }
  f.redundant_experts = absl::GetFlag(FLAGS_redundant_experts);
  f.expert_load = absl::GetFlag(FLAGS_expert_load);
  f.expert_placement = absl::GetFlag(FLAGS_expert_placement);
  f.rebalance_every_steps = absl::GetFlag(FLAGS_rebalance_every_steps);
  f.step_timeout_ms = absl::GetFlag(FLAGS_step_timeout_ms);
  f.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_interval_ms);
  f.heartbeat_misses = absl::GetFlag(FLAGS_heartbeat_misses);
  f.regroup_after_ms = absl::GetFlag(FLAGS_regroup_after_ms);
  f.hold_while_regrouping_ms = absl::GetFlag(FLAGS_hold_while_regrouping_ms);
  f.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  f.max_request_tokens = absl::GetFlag(FLAGS_max_request_tokens);
  f.batch_window_us = absl::GetFlag(FLAGS_batch_window_us);
  f.max_inflight_steps = absl::GetFlag(FLAGS_max_inflight_steps);
  f.max_queue_tokens = absl::GetFlag(FLAGS_max_queue_tokens);
  f.dispatch_dtype = absl::GetFlag(FLAGS_dispatch_dtype);
  f.direct_step_tokens = absl::GetFlag(FLAGS_direct_step_tokens);
  f.max_stream_inflight = absl::GetFlag(FLAGS_max_stream_inflight);
  f.threads = absl::GetFlag(FLAGS_threads);
  f.device = absl::GetFlag(FLAGS_device);
  f.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)};
  f.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  f.worker_listen = absl::GetFlag(FLAGS_worker_listen);
  f.worker_port_file = absl::GetFlag(FLAGS_worker_port_file);
  f.health_listen = absl::GetFlag(FLAGS_health_listen);
  f.health_port_file = absl::GetFlag(FLAGS_health_port_file);
  f.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  f.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  f.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  f.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  f.worker_token_file = absl::GetFlag(FLAGS_worker_token_file);
  f.insecure_workers = absl::GetFlag(FLAGS_insecure_workers);
  f.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  return f;
}

// Adds the family files; prints a family and returns 0 for --print-family.
// Returns -1 when the router is to start.
int AddFamilies(const std::vector<std::string>& files) {
  for (const std::string& file : files) {
    absl::StatusOr<HfFamily> family = AddFamilyFile(file);
    if (int rc = ExitCodeOf(family.status(), 2)) return rc;
    spdlog::info("family file {}: added model_type '{}'", file,
                 HfFamilyName(*family));
  }
  const std::string print = absl::GetFlag(FLAGS_print_family);
  if (print.empty()) return -1;
  absl::StatusOr<std::string> text = PrintFamilyJson(print);
  if (int rc = ExitCodeOf(text.status(), 2)) return rc;
  std::cout << *text;
  return 0;
}

int Main() {
  // gRPC's lines in this log's format; TLS handshake refusals once a
  // minute per peer and reason, instead of gRPC's line per attempt.
  RouteGrpcLogsToSpdlog(/*report_handshake_refusals=*/true);
  auto options = RouterOptions::FromFlags(ReadFlags());
  // Flags the options refuse are usage errors; what the flags name (files,
  // the model, ports) fails later with 2 or 1.
  if (int rc = ExitCodeOf(options.status(), kExitUsage)) return rc;
  Router router(*std::move(options));
  if (int rc = router.Start()) return rc;
  router.Serve();
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::InitServiceProcess(
      argc, argv,
      "MoE router: moe-router (--model DIR | --synthetic ...) "
      "[--listen HOST:PORT] [--num-workers P] [--step-timeout-ms T] "
      "[--max-batch-tokens N] [--batch-window-us U]",
      "router");
  if (int rc =
          moe::AddFamilies(moe::RepeatedFlagValues(argc, argv, "family_file"));
      rc >= 0) {
    return rc;
  }
  return moe::Main();
}

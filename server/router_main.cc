// moe-router: the front end. Validates and batches requests, routes every
// token in fp32, plans the dispatch, drives the expert workers (or computes
// the experts itself with --num-workers 0), adds the shared experts.
#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/cli_args.h"
#include "core/logging.h"
#include "core/metrics_endpoint.h"
#include "core/port_file.h"
#include "core/service_process.h"
#include "core/shutdown_signal.h"
#include "core/status_macros.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "proto/credentials.h"
#include "proto/health_server.h"
#include "proto/model_spec.h"
#include "server/batcher.h"
#include "server/expert_placement.h"
#include "server/expert_stats.h"
#include "server/moe_service.h"
#include "server/router_metrics.h"
#include "server/router_model.h"
#include "server/router_options.h"
#include "server/step_runner.h"
#include "server/token_auth.h"
#include "server/worker_auth.h"
#include "server/worker_pool.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
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
          "MXFP4, FP8 stays FP8, bf16 stays bf16, else fp32; fp32 for "
          "--synthetic), f32, bf16, fp8 (e4m3 with 128x128 block scales; on "
          "a GPU block-scaled FP8 matmuls on sm_90, dequantised to bf16 "
          "elsewhere) or mxfp4 (routed experts as E2M1 with an E8M0 scale "
          "per 32 inputs; on a GPU dequantised to bf16)");
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
ABSL_FLAG(int64_t, step_timeout_ms, 10000,
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
ABSL_FLAG(int64_t, max_batch_tokens, 4096, "tokens per step at most");
ABSL_FLAG(int64_t, max_request_tokens, 0,
          "tokens per request at most (0: --max-batch-tokens)");
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
          "gRPC message size limit (0: fits --max-batch-tokens)");
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

// The gRPC message size limit: --max-message-bytes, or room for the largest
// request or step (rows, routing and a margin).
int MessageLimit(const RouterOptions& o, const ModelInfo& info) {
  int64_t max_bytes = o.max_message_bytes;
  if (max_bytes <= 0) {
    max_bytes =
        o.max_batch_tokens *
            (info.layer.hidden * 4 +
             std::max<int64_t>(info.layer.top_k, info.layer.num_experts) * 8) +
        (16 << 20);
  }
  return static_cast<int>(std::min<int64_t>(max_bytes, INT32_MAX));
}

// The public API: TLS with --tls-cert/--tls-key. Workers: mutual TLS when
// --tls-ca is given (on --worker-listen).
struct ServerCredentials {
  std::shared_ptr<grpc::ServerCredentials> public_api;
  std::shared_ptr<grpc::ServerCredentials> workers;
};
absl::StatusOr<ServerCredentials> MakeCredentials(const TlsFiles& tls) {
  ServerCredentials c;
  MOE_ASSIGN_OR_RETURN(c.public_api,
                       MakeServerCredentials({tls.cert, tls.key, ""}, false));
  MOE_ASSIGN_OR_RETURN(c.workers, MakeServerCredentials(tls, !tls.ca.empty()));
  return c;
}

absl::StatusOr<std::unique_ptr<TokenAuth>> MakeAuth(const std::string& file) {
  if (file.empty()) return nullptr;
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokenFile(file));
  return std::make_unique<TokenAuth>(tokens);
}

// One router process: its parts in the order they are built (and the
// reverse of the order they are destroyed in).
class Router {
 public:
  explicit Router(RouterOptions o) : o_(std::move(o)) {}

  // Builds every part and starts serving; the exit code on failure.
  int Start();
  // Serves until SIGINT/SIGTERM, then drains and stops.
  void Serve();

 private:
  absl::Status LoadModel();
  absl::Status MakePool();
  absl::Status StartMetrics();
  absl::Status MakeBatcher();
  absl::Status MakeService();
  absl::Status StartHealth();
  absl::Status StartServers(const ServerCredentials& creds);
  absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
      grpc::ServerBuilder& b, const std::string& what,
      const std::string& address, const int& port);
  // The health services of every port (public, workers', probes').
  std::vector<grpc::HealthCheckServiceInterface*> HealthServices();
  void ReportReadiness();
  // `full`: every configured worker is in the group (not degraded).
  void SetReady(bool ready, bool full);
  void LogListening() const;
  // Not ready from now on; stops taking calls on the public port, waits for
  // the requests in flight (at most --drain-timeout), then stops the rest.
  void Drain(int sig);

  const RouterOptions o_;
  std::unique_ptr<RouterModel> model_;
  std::unique_ptr<WorkerAuth> worker_auth_;
  std::unique_ptr<WorkerPool> pool_;
  std::shared_ptr<const ExpertPlacement> placement_;  // null: contiguous
  // Metrics before the pool's callbacks: it reports from its first event.
  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
  RouterMetrics metrics_{*registry_};
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<ExpertStatsBook> stats_;
  std::unique_ptr<Rebalancer> rebalancer_;  // with workers
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<TokenAuth> auth_;
  std::unique_ptr<MoeServiceImpl> service_;
  std::unique_ptr<HealthServer> health_;  // --health-listen's
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  int port_ = 0, worker_port_ = 0, health_port_ = 0;
  std::mutex ready_mu_;
  bool was_ready_ = false;  // guarded by ready_mu_
  bool draining_ = false;   // guarded by ready_mu_
};

int Router::Start() {
  // The probe port first: `liveness` answers while a large checkpoint
  // loads, so a startup probe does not kill the router for loading.
  if (int rc = ExitCodeOf(StartHealth(), 1)) return rc;
  if (int rc = ExitCodeOf(Prefixed("loading the model: ", LoadModel()), 1)) {
    return rc;
  }
  if (int rc = ExitCodeOf(MakePool(), 2)) return rc;
  if (int rc = ExitCodeOf(StartMetrics(), 1)) return rc;
  if (int rc = ExitCodeOf(MakeBatcher(), 1)) return rc;
  auto creds = MakeCredentials(o_.tls);
  if (int rc = ExitCodeOf(Prefixed("TLS: ", creds.status()), 2)) return rc;
  if (int rc = ExitCodeOf(MakeService(), 2)) return rc;
  if (int rc = ExitCodeOf(StartServers(*creds), 1)) return rc;
  ReportReadiness();
  if (int rc = ExitCodeOf(WritePortFile(o_.port_file, port_), 1)) return rc;
  LogListening();
  return 0;
}

absl::Status Router::LoadModel() {
  RouterModel::Options mo;
  mo.location = o_.location;
  mo.dtype = o_.dtype;
  mo.all_experts = o_.num_workers == 0;
  mo.threads = o_.threads;
  mo.device = o_.device;
  mo.max_tokens = o_.max_batch_tokens;
  MOE_ASSIGN_OR_RETURN(model_, RouterModel::Load(mo));
  return absl::OkStatus();
}

absl::Status Router::MakePool() {
  if (o_.num_workers == 0) return absl::OkStatus();
  if (!o_.worker_token_file.empty()) {
    auto tokens = ReadTokenFile(o_.worker_token_file);
    if (!tokens.ok()) return Prefixed("--worker-token-file: ", tokens.status());
    worker_auth_ = std::make_unique<WorkerAuth>(*tokens);
  }
  PlacementFlags pf;
  pf.redundant = o_.redundant_experts;
  pf.load_file = o_.expert_load;
  pf.placement_file = o_.expert_placement;
  MOE_ASSIGN_OR_RETURN(placement_,
                       MakeRouterPlacement(model_->info(), o_.num_workers, pf));
  if (placement_ != nullptr) {
    spdlog::info("expert placement ({} redundant slots): {}",
                 placement_->redundant, PlacementToJson(*placement_));
  }
  WorkerPoolOptions po;
  po.world_size = o_.num_workers;
  po.placement = placement_;
  po.num_experts = model_->info().layer.num_experts;
  // The resolved dtype (never "auto"): every worker loads what the router
  // reports.
  po.model = ModelSpecFor(o_.location, WeightDTypeName(model_->dtype()));
  po.collective_timeout = o_.step_timeout;
  po.heartbeat_interval = std::chrono::milliseconds(o_.heartbeat_interval_ms);
  po.heartbeat_misses = o_.heartbeat_misses;
  po.regroup_after = std::chrono::milliseconds(o_.regroup_after_ms);
  po.hold_while_regrouping =
      std::chrono::milliseconds(o_.hold_while_regrouping_ms);
  // One connect attempt: long enough for a busy host, short next to a
  // step timeout, so that a peer stopped for a moment costs one retry.
  po.connect_timeout =
      std::min(o_.step_timeout, std::chrono::milliseconds(3000));
  po.max_batch_tokens = o_.max_batch_tokens;
  po.auth = worker_auth_.get();
  pool_ = std::make_unique<WorkerPool>(po);
  return absl::OkStatus();
}

absl::Status Router::StartMetrics() {
  MOE_ASSIGN_OR_RETURN(
      exposer_, StartMetricsEndpoint(o_.metrics_listen, o_.metrics_port_file,
                                     registry_, "router"));
  return absl::OkStatus();
}

absl::Status Router::MakeBatcher() {
  const int64_t E = model_->info().layer.num_experts;
  stats_ = std::make_unique<ExpertStatsBook>(E);
  if (placement_ != nullptr) {
    stats_->SetPlacement(placement_);
    metrics_.Placement(*placement_, E);
  }
  std::vector<std::unique_ptr<StepRunner>> runners;
  for (int i = 0; i < o_.max_inflight_steps; ++i) {
    MOE_ASSIGN_OR_RETURN(
        auto runner, CreateStepRunner(*model_, pool_.get(),
                                      {o_.dispatch, o_.direct_step_tokens}));
    runners.push_back(std::move(runner));
  }
  if (pool_ != nullptr) {
    Rebalancer::Options ro;
    ro.pool = pool_.get();
    ro.stats = stats_.get();
    ro.metrics = &metrics_;
    ro.info = model_->info();
    ro.world = o_.num_workers;
    ro.redundant =
        placement_ != nullptr ? placement_->redundant : o_.redundant_experts;
    ro.every_steps = o_.rebalance_every_steps;
    rebalancer_ = std::make_unique<Rebalancer>(ro);
  }
  Batcher::Options bo;
  bo.max_batch_tokens = o_.max_batch_tokens;
  bo.window = o_.batch_window;
  bo.step_timeout = o_.step_timeout;
  bo.max_queue_tokens = o_.max_queue_tokens;
  bo.bf16_steps = o_.bf16_results;
  batcher_ = std::make_unique<Batcher>(bo, std::move(runners), stats_.get(),
                                       &metrics_);
  return absl::OkStatus();
}

absl::Status Router::MakeService() {
  auto auth = MakeAuth(o_.auth_token_file);
  if (!auth.ok()) return Prefixed("--auth-token-file: ", auth.status());
  auth_ = std::move(*auth);
  MoeServiceOptions so;
  so.model = model_.get();
  so.batcher = batcher_.get();
  so.pool = pool_.get();
  so.stats = stats_.get();
  so.rebalancer = rebalancer_.get();
  so.metrics = &metrics_;
  so.limits.max_request_tokens = o_.max_request_tokens;
  so.max_batch_tokens = o_.max_batch_tokens;
  so.stream_max_inflight = o_.max_stream_inflight;
  so.stream_max_queued_tokens = o_.stream_max_queued_tokens;
  so.device = model_->device();
  so.auth = auth_.get();
  service_ = std::make_unique<MoeServiceImpl>(so);
  return absl::OkStatus();
}

// Builds and starts `b`, which listens on `address` with `port` bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> Router::StartServer(
    grpc::ServerBuilder& b, const std::string& what, const std::string& address,
    const int& port) {
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", what, address));
  }
  return server;
}

absl::Status Router::StartServers(const ServerCredentials& creds) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const int msg_limit = MessageLimit(o_, model_->info());
  auto configure = [&](grpc::ServerBuilder& b) {
    b.SetMaxReceiveMessageSize(msg_limit);
    b.SetMaxSendMessageSize(msg_limit);
    b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                         o_.max_concurrent_streams);
    // Workers ping every second on idle streams to notice a dead link
    // (worker_agent.cc): allow it rather than answer with GOAWAY. The
    // router pings too, so that a worker whose link died is dropped from
    // the group within a few seconds, not at the next step's timeout.
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                         500);
    b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  };
  const bool own_worker_port = pool_ && !o_.worker_listen.empty();
  grpc::ServerBuilder pub;
  configure(pub);
  pub.AddListeningPort(o_.listen, creds.public_api, &port_);
  pub.RegisterService(service_.get());
  if (pool_ && !own_worker_port) pub.RegisterService(pool_.get());
  MOE_ASSIGN_OR_RETURN(auto server, StartServer(pub, "", o_.listen, port_));
  servers_.push_back(std::move(server));
  if (own_worker_port) {
    grpc::ServerBuilder b;
    configure(b);
    b.AddListeningPort(o_.worker_listen, creds.workers, &worker_port_);
    b.RegisterService(pool_.get());
    MOE_ASSIGN_OR_RETURN(
        auto server,
        StartServer(b, "--worker-listen ", o_.worker_listen, worker_port_));
    servers_.push_back(std::move(server));
    MOE_RETURN_IF_ERROR(WritePortFile(o_.worker_port_file, worker_port_));
  }
  return absl::OkStatus();
}

absl::Status Router::StartHealth() {
  if (o_.health_listen.empty()) return absl::OkStatus();
  // Plaintext, health only: for probes that speak neither TLS nor tokens.
  // NOT_SERVING (but alive) until ReportReadiness.
  MOE_ASSIGN_OR_RETURN(health_, HealthServer::Start(o_.health_listen));
  for (const char* name : {"", "moe.v1.MoeService", "full-capacity"}) {
    health_->service().SetServingStatus(name, false);
  }
  health_port_ = health_->port();
  return WritePortFile(o_.health_port_file, health_port_);
}

std::vector<grpc::HealthCheckServiceInterface*> Router::HealthServices() {
  std::vector<grpc::HealthCheckServiceInterface*> out;
  for (auto& s : servers_) out.push_back(s->GetHealthCheckService());
  if (health_) out.push_back(health_->server().GetHealthCheckService());
  return out;
}

void Router::SetReady(bool ready, bool full) {
  std::lock_guard<std::mutex> lock(ready_mu_);
  if (draining_) ready = false;
  // Each status by name: the all-services setter would take "liveness"
  // down with readiness, and probes would kill a router that waits for its
  // workers.
  for (grpc::HealthCheckServiceInterface* h : HealthServices()) {
    h->SetServingStatus("", ready);  // overall
    h->SetServingStatus("moe.v1.MoeService", ready);
    // Serving with every configured worker: NOT_SERVING while degraded
    // (fewer workers, less capacity), for alerts rather than routing.
    h->SetServingStatus("full-capacity", ready && full);
  }
  if (ready != was_ready_)
    spdlog::info("router {}", ready ? "ready" : "not ready");
  was_ready_ = ready;
}

// Every server has its own health service; all tell the same story: ready
// at once without workers, else when the pool's group is.
void Router::ReportReadiness() {
  for (grpc::HealthCheckServiceInterface* h : HealthServices())
    h->SetServingStatus(kLivenessService, true);
  {
    std::lock_guard<std::mutex> lock(ready_mu_);
    was_ready_ = pool_ == nullptr;
  }
  SetReady(pool_ == nullptr, pool_ == nullptr);
  if (!pool_) return;
  pool_->SetStateCallback([this](const WorkerPool::State& st) {
    SetReady(st.ready, !st.degraded());
    metrics_.Workers(st.world_size, st.connected, st.ready_workers,
                     st.generation);
    metrics_.Group(st.group_size);
  });
  metrics_.Workers(o_.num_workers, 0, 0, 0);
}

void Router::LogListening() const {
  spdlog::info(
      "router listening on port {}{} ({} workers{}, max batch {} tokens, "
      "window "
      "{} us, {} steps in flight{}{}{})",
      port_, o_.tls.cert.empty() ? "" : " (TLS)", o_.num_workers,
      worker_port_ ? absl::StrCat(" on port ", worker_port_,
                                  o_.tls.ca.empty() ? "" : " (mutual TLS)")
                   : "",
      o_.max_batch_tokens, o_.batch_window.count(), o_.max_inflight_steps,
      // How rows and results travel, when not the default.
      o_.dispatch_dtype == "auto"
          ? ""
          : absl::StrCat(", --dispatch-dtype ", o_.dispatch_dtype),
      health_port_ ? absl::StrCat(", health on port ", health_port_) : "",
      auth_ ? ", bearer tokens required" : "");
}

void Router::Serve() {
  std::mutex mu;
  std::condition_variable cv;
  int signal = 0;
  // The handler's thread outlives Serve only after it has run.
  OnShutdownSignal([&](int sig) {
    std::lock_guard<std::mutex> lock(mu);
    signal = sig;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return signal != 0; });
  }
  Drain(signal);
  batcher_->Shutdown();
  spdlog::info("router stopped");
}

void Router::Drain(int sig) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + o_.drain_wait;
  spdlog::info("signal {}: draining, {} requests in flight (at most {} ms)",
               sig, metrics_.inflight(), o_.drain_wait.count());
  {
    std::lock_guard<std::mutex> lock(ready_mu_);
    draining_ = true;
  }
  SetReady(false, false);
  // The public port takes no new calls from now on (clients get GOAWAY and
  // go elsewhere); calls in flight go on, and so do the workers' streams
  // when they share the port. Shutdown returns once they are all done, or
  // cancels what is left at the deadline.
  grpc::Server* pub = servers_.front().get();
  std::atomic<bool> pub_done{false};
  std::thread stop_public([&] {
    pub->Shutdown(std::chrono::system_clock::now() + o_.drain_wait);
    pub_done = true;
  });
  while (metrics_.inflight() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double left = metrics_.inflight();
  // The last answers are on their way: let them out, then end what cannot
  // end by itself (worker streams, health watches).
  const auto flush = std::min<Clock::time_point>(
      deadline, Clock::now() + std::chrono::milliseconds(200));
  while (!pub_done && Clock::now() < flush) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (pool_) pool_->Shutdown();
  if (!pub_done) grpc_server_cancel_all_calls(pub->c_server());
  stop_public.join();
  for (size_t i = 1; i < servers_.size(); ++i) {
    servers_[i]->Shutdown(std::chrono::system_clock::now());
  }
  if (health_) health_->Shutdown();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      Clock::now() - start)
                      .count();
  if (left > 0) {
    spdlog::warn("drain timed out after {} ms with {} requests in flight", ms,
                 left);
  } else {
    spdlog::info("drained in {} ms", ms);
  }
}

int Main() {
  auto options = RouterOptions::FromFlags(ReadFlags());
  if (!options.ok()) {
    spdlog::error("{}", options.status().message());
    return 2;
  }
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
  return moe::Main();
}

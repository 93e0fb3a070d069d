// moe-router: the front end. Validates and batches requests, routes every
// token in fp32, plans the dispatch, drives the expert workers (or computes
// the experts itself with --num-workers 0), adds the shared experts.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/cli_args.h"
#include "core/logging.h"
#include "core/port_file.h"
#include "core/shutdown_signal.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "proto/credentials.h"
#include "proto/model_spec.h"
#include "server/batcher.h"
#include "server/expert_stats.h"
#include "server/moe_service.h"
#include "server/router_metrics.h"
#include "server/router_model.h"
#include "server/step_runner.h"
#include "server/token_auth.h"
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
ABSL_FLAG(std::string, weight_dtype, "f32", "expert weights: f32 or bf16");
ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "gRPC address (public API)");
ABSL_FLAG(std::string, port_file, "",
          "write the bound port here once serving (for --listen host:0)");
ABSL_FLAG(int, num_workers, 2, "expert workers P; 0 = experts in-process");
ABSL_FLAG(int64_t, step_timeout_ms, 10000,
          "deadline of one step on the workers, collectives included");
ABSL_FLAG(int64_t, max_batch_tokens, 4096, "tokens per step at most");
ABSL_FLAG(int64_t, max_request_tokens, 0,
          "tokens per request at most (0: --max-batch-tokens)");
ABSL_FLAG(int64_t, batch_window_us, 500,
          "how long the oldest queued request waits for others to join its "
          "step; 0 = no wait (requests already queued still share a step)");
ABSL_FLAG(int, max_inflight_steps, 2, "steps in flight at once (pipelining)");
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

absl::StatusOr<ModelLocation> LocationFromFlags() {
  ModelLocation loc;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    loc.checkpoint_dir = absl::GetFlag(FLAGS_model);
    return loc;
  }
  if (!absl::GetFlag(FLAGS_synthetic)) {
    return absl::InvalidArgumentError("give --model DIR or --synthetic");
  }
  SyntheticArgs a;
  a.hidden = absl::GetFlag(FLAGS_hidden);
  a.inter = absl::GetFlag(FLAGS_inter);
  a.experts = absl::GetFlag(FLAGS_experts);
  a.top_k = absl::GetFlag(FLAGS_top_k);
  a.shared_inter = absl::GetFlag(FLAGS_shared_inter);
  a.layers = absl::GetFlag(FLAGS_layers);
  a.seed = absl::GetFlag(FLAGS_seed);
  a.options_json = absl::GetFlag(FLAGS_moe_options);
  auto spec = MakeSyntheticSpec(a);
  if (!spec.ok()) return spec.status();
  loc.synthetic = *spec;
  return loc;
}

int Main() {
  auto loc = LocationFromFlags();
  if (!loc.ok()) {
    spdlog::error("{}", loc.status().message());
    return 2;
  }
  auto dtype = ParseWeightDType(absl::GetFlag(FLAGS_weight_dtype));
  const int workers = absl::GetFlag(FLAGS_num_workers);
  const int64_t max_batch = absl::GetFlag(FLAGS_max_batch_tokens);
  int64_t max_request = absl::GetFlag(FLAGS_max_request_tokens);
  if (max_request <= 0) max_request = max_batch;
  const int inflight = absl::GetFlag(FLAGS_max_inflight_steps);
  if (!dtype.ok() || workers < 0 || workers > 1024 || max_batch < 1 ||
      max_request > max_batch || inflight < 1 ||
      absl::GetFlag(FLAGS_step_timeout_ms) < 1 ||
      absl::GetFlag(FLAGS_batch_window_us) < 0 ||
      absl::GetFlag(FLAGS_device).empty()) {
    spdlog::error(
        "bad flags: need --weight-dtype f32|bf16, 0 <= --num-workers <= 1024, "
        "--max-batch-tokens >= 1, --max-request-tokens <= --max-batch-tokens, "
        "--max-inflight-steps >= 1, --step-timeout-ms >= 1, "
        "--batch-window-us >= 0, --device cpu|cuda|cuda:N");
    return 2;
  }
  const int threads = ThreadsOrAllCores(absl::GetFlag(FLAGS_threads));

  RouterModel::Options mo;
  mo.location = *loc;
  mo.dtype = *dtype;
  mo.all_experts = workers == 0;
  mo.threads = threads;
  mo.device = absl::GetFlag(FLAGS_device);
  mo.max_tokens = max_batch;
  auto model = RouterModel::Load(mo);
  if (!model.ok()) {
    spdlog::error("loading the model: {}", model.status().message());
    return 1;
  }
  const ModelInfo& info = (*model)->info();

  std::unique_ptr<WorkerPool> pool;
  if (workers > 0) {
    WorkerPoolOptions po;
    po.world_size = workers;
    po.num_experts = info.layer.num_experts;
    po.model = ModelSpecFor(*loc, WeightDTypeName(*dtype));
    po.collective_timeout =
        std::chrono::milliseconds(absl::GetFlag(FLAGS_step_timeout_ms));
    po.max_batch_tokens = max_batch;
    pool = std::make_unique<WorkerPool>(po);
  }
  // Metrics first: the pool reports into them from its first event.
  auto registry = std::make_shared<prometheus::Registry>();
  RouterMetrics metrics(*registry);
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(
          absl::GetFlag(FLAGS_metrics_listen));
    } catch (const std::exception& e) {
      spdlog::error("--metrics-listen {}: {}",
                    absl::GetFlag(FLAGS_metrics_listen), e.what());
      return 1;
    }
    exposer->RegisterCollectable(registry);
    const int metrics_port = exposer->GetListeningPorts().at(0);
    WritePortFile(absl::GetFlag(FLAGS_metrics_port_file), metrics_port);
    spdlog::info("metrics on port {} (/metrics)", metrics_port);
  }
  ExpertStatsBook stats(info.layer.num_experts);
  std::vector<std::unique_ptr<StepRunner>> runners;
  for (int i = 0; i < inflight; ++i) {
    auto runner = CreateStepRunner(**model, pool.get());
    if (!runner.ok()) {
      spdlog::error("{}", runner.status().message());
      return 1;
    }
    runners.push_back(std::move(*runner));
  }
  Batcher::Options bo;
  bo.max_batch_tokens = max_batch;
  bo.window = std::chrono::microseconds(absl::GetFlag(FLAGS_batch_window_us));
  bo.step_timeout =
      std::chrono::milliseconds(absl::GetFlag(FLAGS_step_timeout_ms));
  Batcher batcher(bo, std::move(runners), &stats, &metrics);

  MoeServiceOptions so;
  so.model = model->get();
  so.batcher = &batcher;
  so.pool = pool.get();
  so.stats = &stats;
  so.metrics = &metrics;
  so.limits.max_request_tokens = max_request;
  so.max_batch_tokens = max_batch;
  so.device = (*model)->device();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Room for the largest request or step: rows, routing and a margin.
  int64_t max_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_bytes <= 0) {
    max_bytes =
        max_batch *
            (info.layer.hidden * 4 +
             std::max<int64_t>(info.layer.top_k, info.layer.num_experts) * 8) +
        (16 << 20);
  }
  const int msg_limit =
      static_cast<int>(std::min<int64_t>(max_bytes, INT32_MAX));

  // The public API: TLS when --tls-cert/--tls-key are given.
  const TlsFiles tls{absl::GetFlag(FLAGS_tls_cert),
                     absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)};
  auto public_creds = MakeServerCredentials({tls.cert, tls.key, ""}, false);
  // Workers: mutual TLS when --tls-ca is given (on --worker-listen).
  auto worker_creds = MakeServerCredentials(tls, !tls.ca.empty());
  const std::string worker_listen = absl::GetFlag(FLAGS_worker_listen);
  if (!public_creds.ok() || !worker_creds.ok()) {
    spdlog::error(
        "TLS: {}",
        (!public_creds.ok() ? public_creds : worker_creds).status().message());
    return 2;
  }
  if (!tls.ca.empty() && worker_listen.empty() && pool) {
    spdlog::error(
        "--tls-ca (mutual TLS with the workers) needs --worker-listen");
    return 2;
  }
  std::unique_ptr<TokenAuth> auth;
  if (const std::string f = absl::GetFlag(FLAGS_auth_token_file); !f.empty()) {
    auto tokens = ReadTokenFile(f);
    if (!tokens.ok()) {
      spdlog::error("--auth-token-file: {}", tokens.status().message());
      return 2;
    }
    auth = std::make_unique<TokenAuth>(*tokens);
  }
  so.auth = auth.get();
  MoeServiceImpl service(so);

  auto configure = [&](grpc::ServerBuilder& b) {
    b.SetMaxReceiveMessageSize(msg_limit);
    b.SetMaxSendMessageSize(msg_limit);
    b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                         absl::GetFlag(FLAGS_max_concurrent_streams));
  };
  std::vector<std::unique_ptr<grpc::Server>> servers;
  int port = 0, worker_port = 0, health_port = 0;
  {
    grpc::ServerBuilder b;
    configure(b);
    b.AddListeningPort(absl::GetFlag(FLAGS_listen), *public_creds, &port);
    b.RegisterService(&service);
    if (pool && worker_listen.empty()) b.RegisterService(pool.get());
    servers.push_back(b.BuildAndStart());
    if (!servers.back() || port == 0) {
      spdlog::error("cannot listen on {}", absl::GetFlag(FLAGS_listen));
      return 1;
    }
  }
  if (pool && !worker_listen.empty()) {
    grpc::ServerBuilder b;
    configure(b);
    b.AddListeningPort(worker_listen, *worker_creds, &worker_port);
    b.RegisterService(pool.get());
    servers.push_back(b.BuildAndStart());
    if (!servers.back() || worker_port == 0) {
      spdlog::error("cannot listen on --worker-listen {}", worker_listen);
      return 1;
    }
    WritePortFile(absl::GetFlag(FLAGS_worker_port_file), worker_port);
  }
  if (const std::string h = absl::GetFlag(FLAGS_health_listen); !h.empty()) {
    // Plaintext, health only: for probes that speak neither TLS nor tokens.
    grpc::ServerBuilder b;
    b.AddListeningPort(h, grpc::InsecureServerCredentials(), &health_port);
    servers.push_back(b.BuildAndStart());
    if (!servers.back() || health_port == 0) {
      spdlog::error("cannot listen on --health-listen {}", h);
      return 1;
    }
    WritePortFile(absl::GetFlag(FLAGS_health_port_file), health_port);
  }

  // Every server has its own health service; all tell the same story.
  for (auto& s : servers)
    s->GetHealthCheckService()->SetServingStatus("liveness", true);
  bool was_ready = pool == nullptr;
  auto set_ready = [&servers, &was_ready](bool ready) {
    for (auto& s : servers) {
      s->GetHealthCheckService()->SetServingStatus(ready);  // overall ("")
      s->GetHealthCheckService()->SetServingStatus("moe.v1.MoeService", ready);
    }
    if (ready != was_ready)
      spdlog::info("router {}", ready ? "ready" : "not ready");
    was_ready = ready;
  };
  set_ready(pool == nullptr);
  if (pool) {
    pool->SetStateCallback([&](const WorkerPool::State& st) {
      set_ready(st.ready);
      metrics.Workers(st.world_size, st.connected, st.ready_workers,
                      st.generation);
    });
    metrics.Workers(workers, 0, 0, 0);
  }
  WritePortFile(absl::GetFlag(FLAGS_port_file), port);
  spdlog::info(
      "router listening on port {}{} ({} workers{}, max batch {} tokens, "
      "window "
      "{} us, {} steps in flight{}{})",
      port, tls.cert.empty() ? "" : " (TLS)", workers,
      worker_port ? absl::StrCat(" on port ", worker_port,
                                 tls.ca.empty() ? "" : " (mutual TLS)")
                  : "",
      max_batch, absl::GetFlag(FLAGS_batch_window_us), inflight,
      health_port ? absl::StrCat(", health on port ", health_port) : "",
      auth ? ", bearer tokens required" : "");

  OnShutdownSignal([&](int sig) {
    spdlog::info("signal {}: shutting down", sig);
    if (pool) pool->Shutdown();
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::seconds(2);
    for (auto& s : servers) s->Shutdown(deadline);
  });
  for (auto& s : servers) s->Wait();
  batcher.Shutdown();
  spdlog::info("router stopped");
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::BlockShutdownSignals();  // before any thread starts
  absl::SetProgramUsageMessage(
      "MoE router: moe-router (--model DIR | --synthetic ...) "
      "[--listen HOST:PORT] [--num-workers P] [--step-timeout-ms T] "
      "[--max-batch-tokens N] [--batch-window-us U]");
  moe::NormalizedArgs args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [router] [%l] %v");
  return moe::Main();
}

// moe-worker: owns a shard of the experts of every MoE layer, joins the
// router's collective group and runs its part of each step.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <csignal>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/cli_args.h"
#include "core/flag_help.h"
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
#include "worker/worker_agent.h"
#include "worker/worker_options.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051",
          "router address (host:port) to register with");
ABSL_FLAG(std::string, device, "cpu", "compute device: cpu, cuda or cuda:N");
ABSL_FLAG(int, threads, 0, "compute threads (0: all cores)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signed the router's certificate (TLS to the router)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate presented to the router (mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(
    std::string, tls_server_name, "",
    "name to verify in the router's certificate instead of --router's host");
ABSL_FLAG(std::string, health_listen, "",
          "plaintext grpc.health.v1 address for probes (SERVING once in a "
          "ready group; 'liveness' always)");
ABSL_FLAG(std::string, health_port_file, "",
          "write the bound health port here");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics address, e.g. 0.0.0.0:9091 (empty: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the bound metrics port here (for --metrics-listen host:0)");
ABSL_FLAG(std::string, collective, "auto",
          "collective library: nccl (GPUs, one rank per GPU), gloo (host "
          "memory over TCP; CUDA workers stage through pinned memory, so "
          "several can share one GPU) or auto (nccl on cuda, gloo on cpu)");
ABSL_FLAG(std::string, device_identity, "",
          "what the router knows this worker's device by when it checks "
          "that NCCL workers do not share a GPU (default: the GPU's UUID; "
          "empty on a CPU); for containers that hide UUIDs, and for tests");
ABSL_FLAG(std::string, collective_host, "auto",
          "address other workers reach this worker's collective transport "
          "on; auto: the local address of the interface that reaches "
          "--router, looked up at each registration. Set it when the other "
          "workers reach this one by another address (NAT, a pod IP behind "
          "a proxy, a separate data network)");

ABSL_FLAG(int64_t, max_batch_tokens, 0,
          "rows per step this worker accepts at most, and sizes its "
          "workspaces for (0: the router's --max-batch-tokens); a bigger "
          "step is refused with RESOURCE_EXHAUSTED");

ABSL_FLAG(std::string, worker_token_file, "",
          "bearer tokens, one per line (the router's --worker-token-file): "
          "the first is presented on every call to the router");

namespace moe {
namespace {

WorkerFlags ReadFlags() {
  WorkerFlags f;
  f.router = absl::GetFlag(FLAGS_router);
  f.device = absl::GetFlag(FLAGS_device);
  f.threads = absl::GetFlag(FLAGS_threads);
  f.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)};
  f.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  f.health_listen = absl::GetFlag(FLAGS_health_listen);
  f.health_port_file = absl::GetFlag(FLAGS_health_port_file);
  f.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  f.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  f.collective_host = absl::GetFlag(FLAGS_collective_host);
  f.collective = absl::GetFlag(FLAGS_collective);
  f.device_identity = absl::GetFlag(FLAGS_device_identity);
  f.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  f.worker_token_file = absl::GetFlag(FLAGS_worker_token_file);
  return f;
}

// Serves grpc.health.v1 on --health-listen ('liveness' always, overall
// SERVING once in a ready group, through `agent->on_ready`); null when it
// is not given.
absl::StatusOr<std::unique_ptr<HealthServer>> StartHealth(
    const WorkerProcessOptions& o, WorkerOptions* agent) {
  if (o.health_listen.empty()) return nullptr;
  MOE_ASSIGN_OR_RETURN(
      auto health,
      HealthServer::Start(o.health_listen,
                          "the router's --listen address, not a worker's"));
  HealthService* svc = &health->service();
  svc->SetServingStatus("", false);
  agent->on_ready = [svc](bool ready) { svc->SetServingStatus("", ready); };
  MOE_RETURN_IF_ERROR(WritePortFile(o.health_port_file, health->port()));
  spdlog::info("health on port {}", health->port());
  return health;
}

// Runs the agent until SIGINT/SIGTERM.
void Serve(const WorkerOptions& opts, std::unique_ptr<StepExecutor> executor) {
  // Gloo's TCP pairs write with writev, which raises SIGPIPE when a peer is
  // gone (killed mid-exchange): that must be an error on the step, not the
  // end of this worker too. Seen: a peer killed with SIGKILL took a second
  // worker down silently, leaving one worker of three.
  std::signal(SIGPIPE, SIG_IGN);
  WorkerAgent agent(opts, std::move(executor));
  OnShutdownSignal([&agent](int sig) {
    spdlog::info("signal {}: finishing the current step, then leaving", sig);
    agent.Shutdown();
  });
  spdlog::info("worker starting: router {}, {} threads", opts.router,
               opts.threads);
  agent.Run();
}

int Main() {
  auto o = WorkerProcessOptions::FromFlags(ReadFlags());
  if (int rc = ExitCodeOf(o.status(), kExitUsage)) return rc;
  WorkerOptions opts;
  opts.router = o->router;
  opts.device = o->device;
  opts.threads = o->threads;
  opts.collective_host = o->collective_host;
  opts.server_name = o->tls_server_name;
  opts.max_batch_tokens = o->max_batch_tokens;
  if (!o->worker_token_file.empty()) {
    auto tokens = ReadTokenFile(o->worker_token_file);
    if (!tokens.ok()) {
      spdlog::error("--worker-token-file: {}", tokens.status().message());
      return 2;
    }
    opts.auth_token = tokens->front();
  }
  // Before the device: a key that is not the certificate's, or a file that
  // holds no PEM, is a usage error to report now, not after loading a GPU.
  auto creds = MakeChannelCredentials(o->tls);
  if (!creds.ok()) {
    spdlog::error("TLS: {}", creds.status().message());
    return 2;
  }
  // Null for plaintext: the connection's retry line then says what a TLS
  // router closing on it means.
  if (!o->tls.empty()) opts.credentials = *creds;
  auto executor =
      CreateStepExecutor(opts.device, opts.threads, o->collective_kind);
  if (int rc = ExitCodeOf(executor.status(), 2)) return rc;
  opts.device_identity = o->device_identity.empty()
                             ? (*executor)->device_identity()
                             : o->device_identity;
  opts.shares_device = (*executor)->shares_device();
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(*registry);
  opts.metrics = &metrics;
  auto exposer = StartMetricsEndpoint(o->metrics_listen, o->metrics_port_file,
                                      registry, "worker");
  if (int rc = ExitCodeOf(exposer.status(), 1)) return rc;
  auto health = StartHealth(*o, &opts);
  if (int rc = ExitCodeOf(health.status(), 1)) return rc;
  Serve(opts, std::move(*executor));
  if (*health) (*health)->Shutdown();
  spdlog::info("worker stopped");
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::InitServiceProcess(argc, argv,
                          "Expert worker: moe-worker --router HOST:PORT "
                          "[--device cpu] [--threads T]",
                          "worker %P");
  return moe::Main();
}

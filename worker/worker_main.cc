// moe-worker: owns a shard of the experts of every MoE layer, joins the
// router's collective group and runs its part of each step.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/cli_args.h"
#include "core/logging.h"
#include "core/port_file.h"
#include "core/shutdown_signal.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "proto/credentials.h"
#include "worker/worker_agent.h"

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
ABSL_FLAG(std::string, collective_host, "127.0.0.1",
          "address other workers reach this worker's collective transport "
          "on (the pod IP in Kubernetes)");

int main(int argc, char** argv) {
  moe::BlockShutdownSignals();  // before any thread starts
  absl::SetProgramUsageMessage(
      "Expert worker: moe-worker --router HOST:PORT [--device cpu] "
      "[--threads T]");
  moe::NormalizedArgs args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [worker %P] [%l] %v");

  moe::WorkerOptions opts;
  opts.router = absl::GetFlag(FLAGS_router);
  opts.device = absl::GetFlag(FLAGS_device);
  opts.threads = moe::ThreadsOrAllCores(absl::GetFlag(FLAGS_threads));
  opts.collective_host = absl::GetFlag(FLAGS_collective_host);
  auto collective = moe::ParseCollective(absl::GetFlag(FLAGS_collective));
  if (!collective.ok()) {
    spdlog::error("{}", collective.status().message());
    return 2;
  }
  auto executor =
      moe::CreateStepExecutor(opts.device, opts.threads, *collective);
  if (!executor.ok()) {
    spdlog::error("{}", executor.status().message());
    return 2;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  moe::WorkerMetrics metrics(*registry);
  opts.metrics = &metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (const std::string listen = absl::GetFlag(FLAGS_metrics_listen);
      !listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(listen);
    } catch (const std::exception& e) {
      spdlog::error("--metrics-listen {}: {}", listen, e.what());
      return 1;
    }
    exposer->RegisterCollectable(registry);
    const int port = exposer->GetListeningPorts().at(0);
    moe::WritePortFile(absl::GetFlag(FLAGS_metrics_port_file), port);
    spdlog::info("metrics on port {} (/metrics)", port);
  }
  auto creds = moe::MakeChannelCredentials({absl::GetFlag(FLAGS_tls_cert),
                                            absl::GetFlag(FLAGS_tls_key),
                                            absl::GetFlag(FLAGS_tls_ca)});
  if (!creds.ok()) {
    spdlog::error("TLS: {}", creds.status().message());
    return 2;
  }
  opts.credentials = *creds;
  opts.server_name = absl::GetFlag(FLAGS_tls_server_name);

  std::unique_ptr<grpc::Server> health;
  if (const std::string h = absl::GetFlag(FLAGS_health_listen); !h.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(h, grpc::InsecureServerCredentials(), &port);
    health = b.BuildAndStart();
    if (!health || port == 0) {
      spdlog::error("cannot listen on --health-listen {}", h);
      return 1;
    }
    auto* svc = health->GetHealthCheckService();
    svc->SetServingStatus("liveness", true);
    svc->SetServingStatus(false);
    opts.on_ready = [svc](bool ready) { svc->SetServingStatus(ready); };
    moe::WritePortFile(absl::GetFlag(FLAGS_health_port_file), port);
    spdlog::info("health on port {}", port);
  }
  moe::WorkerAgent agent(opts, std::move(*executor));
  moe::OnShutdownSignal([&agent](int sig) {
    spdlog::info("signal {}: shutting down", sig);
    agent.Shutdown();
  });
  spdlog::info("worker starting: router {}, {} threads", opts.router,
               opts.threads);
  agent.Run();
  if (health) health->Shutdown();
  spdlog::info("worker stopped");
  return 0;
}

// moe-worker: owns a shard of the experts of every MoE layer, joins the
// router's collective group and runs its part of each step.
#include <algorithm>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/cli_args.h"
#include "core/logging.h"
#include "core/port_file.h"
#include "core/shutdown_signal.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "worker/worker_agent.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50051",
          "router address (host:port) to register with");
ABSL_FLAG(std::string, device, "cpu", "compute device: cpu");
ABSL_FLAG(int, threads, 0, "compute threads (0: all cores)");
ABSL_FLAG(std::string, metrics_listen, "",
          "Prometheus /metrics address, e.g. 0.0.0.0:9091 (empty: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the bound metrics port here (for --metrics-listen host:0)");
ABSL_FLAG(std::string, collective_host, "127.0.0.1",
          "address other workers reach this worker's collective transport "
          "on (the pod IP in Kubernetes)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Expert worker: moe-worker --router HOST:PORT [--device cpu] "
      "[--threads T]");
  moe::NormalizedArgs args(argc, argv);
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [worker %P] [%l] %v");

  moe::WorkerOptions opts;
  opts.router = absl::GetFlag(FLAGS_router);
  opts.device = absl::GetFlag(FLAGS_device);
  const int threads = absl::GetFlag(FLAGS_threads);
  opts.threads =
      threads > 0
          ? threads
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opts.collective_host = absl::GetFlag(FLAGS_collective_host);
  if (opts.device != "cpu") {
    spdlog::error("--device {}: this build supports cpu", opts.device);
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
  moe::WorkerAgent agent(opts);
  // Before any thread starts (constructing the agent starts none).
  moe::HandleShutdownSignals([&agent](int sig) {
    spdlog::info("signal {}: shutting down", sig);
    agent.Shutdown();
  });
  spdlog::info("worker starting: router {}, {} threads", opts.router,
               opts.threads);
  agent.Run();
  spdlog::info("worker stopped");
  return 0;
}

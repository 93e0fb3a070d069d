// One moe-router process: its parts built in order from RouterOptions (the
// model, the worker pool and placement, metrics, the batcher and its step
// runners, the services), served on RouterServers, and drained and stopped
// on request. router_main.cc only turns flags into options and runs this.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/api/moe_service.h"
#include "server/api/token_auth.h"
#include "server/api/worker_auth.h"
#include "server/api/worker_control_service.h"
#include "server/batching/batcher.h"
#include "server/group/worker_group_factory.h"
#include "server/placement/expert_placement.h"
#include "server/placement/rebalancer.h"
#include "server/router_options.h"
#include "server/router_servers.h"
#include "server/step/expert_stats.h"
#include "server/step/router_metrics.h"
#include "server/step/router_model.h"

namespace moe {

class Router {
 public:
  explicit Router(RouterOptions o);
  ~Router();

  // Builds every part and starts serving. On failure, logs why and returns
  // the process's exit code: 2 for a configuration the router refuses
  // (placement, TLS or token files), 1 for anything else (a port, the
  // model); 0 once serving.
  int Start();
  // Serves until SIGINT/SIGTERM (the signals must have been blocked, see
  // core/shutdown_signal.h), then Stop.
  void Serve();
  // Drains (not ready from now on; the public port takes no new calls; the
  // requests in flight get --drain-timeout to finish), then stops every
  // server and the batcher. `why` starts the log line.
  void Stop(const std::string& why);

  int port() const { return servers_->port(); }
  int worker_port() const { return servers_->worker_port(); }
  int health_port() const { return servers_->health_port(); }

 private:
  absl::Status LoadModel();
  absl::Status MakePool();
  absl::Status StartMetrics();
  absl::Status MakeBatcher();
  absl::Status MakeService();
  // Every server tells the same story: ready at once without workers,
  // else when the pool's group is.
  void ReportReadiness();

  const RouterOptions o_;
  std::unique_ptr<RouterModel> model_;
  std::unique_ptr<WorkerAuth> worker_auth_;
  std::unique_ptr<WorkerGroupSeams> pool_;
  std::unique_ptr<WorkerControlService> worker_service_;  // pool_'s gRPC side
  std::shared_ptr<const ExpertPlacement> placement_;      // null: contiguous
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
  // Last: the servers stop first, while what they serve is still there.
  std::unique_ptr<RouterServers> servers_;
};

}  // namespace moe

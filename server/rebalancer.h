// Live rebalancing of the expert placement (--rebalance-every-steps K, the
// Rebalance RPC): a new EPLB placement (engine/placement.h) from the
// per-expert load seen since the last rebalance, which the worker pool has
// the workers load in the background and then switches to at one step
// boundary. One thread runs every rebalance, one at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "moe/v1/moe.pb.h"
#include "server/expert_stats.h"
#include "server/router_metrics.h"
#include "server/worker_pool.h"

namespace moe {

class Rebalancer {
 public:
  struct Options {
    WorkerPool* pool = nullptr;
    ExpertStatsBook* stats = nullptr;
    RouterMetrics* metrics = nullptr;  // may be null
    ModelInfo info;
    int world = 1;
    int64_t redundant = 0;
    int64_t every_steps = 0;  // 0: only when asked
    // Loading and switching must be done by then.
    std::chrono::milliseconds timeout{60000};
  };
  using Done =
      std::function<void(const absl::StatusOr<moe::v1::RebalanceResponse>&)>;

  explicit Rebalancer(Options options);
  ~Rebalancer();  // stops the thread; pending requests get UNAVAILABLE

  // Queues a rebalance; `done` runs on the rebalancer's thread.
  void Request(Done done);

 private:
  void Loop();
  absl::StatusOr<moe::v1::RebalanceResponse> RunOnce();
  // The placement for the load since the last rebalance.
  absl::StatusOr<std::shared_ptr<const ExpertPlacement>> NextPlacement();

  Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Done> requests_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  // The stats' counts and steps at the last rebalance (this thread only).
  std::map<int64_t, std::vector<int64_t>> last_counts_;
  int64_t last_steps_ = 0;
  std::thread thread_;
};

}  // namespace moe

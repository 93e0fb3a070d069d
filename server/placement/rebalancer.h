// Live rebalancing of the expert placement (--rebalance-every-steps K, the
// Rebalance RPC): a new EPLB placement (engine/placement.h) from the
// per-expert load seen since the last rebalance, which the worker pool has
// the workers load in the background and then switches to at one step
// boundary. One thread runs every rebalance, one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/model_source.h"
#include "server/placement/placement_target.h"
#include "server/step/expert_stats.h"
#include "server/step/router_metrics.h"

namespace moe {

// Holds what one rebalance achieved (the Rebalance RPC's answer).
struct RebalanceOutcome {
  uint64_t epoch = 0;  // of the placement now in force
  double seconds = 0;  // computing, loading and switching
};

class Rebalancer {
 public:
  struct Options {
    // Points to where placements are read and switched (the router's worker
    // pool).
    PlacementTarget* placements = nullptr;
    ExpertStatsBook* stats = nullptr;
    RouterMetrics* metrics = nullptr;  // may be null
    ModelInfo info;
    int world = 1;
    int64_t redundant = 0;
    int64_t every_steps = 0;  // 0: only when asked
    // Loading and switching must be done by then, or the rebalance fails.
    std::chrono::milliseconds timeout{60000};
  };
  using Done = std::function<void(const absl::StatusOr<RebalanceOutcome>&)>;

  explicit Rebalancer(Options options);
  ~Rebalancer();  // stops the thread; pending requests get UNAVAILABLE

  // At most this many asked rebalances wait behind the one running.
  static constexpr size_t kMaxQueuedRequests = 4;

  // Queues a rebalance; `done` runs on the rebalancer's thread, or at once
  // with RESOURCE_EXHAUSTED when kMaxQueuedRequests already wait (each
  // rebalance loads weights on every worker: a client asking faster than
  // that gets refused, not queued without bound).
  void Request(Done done);

 private:
  void Loop();
  absl::StatusOr<RebalanceOutcome> RunOnce();
  // Computes the placement for the load since the last rebalance.
  absl::StatusOr<std::shared_ptr<const ExpertPlacement>> NextPlacement();

  Options options_;
  PlacementTarget* placements_;
  absl::Mutex mu_;
  std::deque<Done> requests_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Holds the stats' counts and steps at the last rebalance (this thread only).
  std::map<int64_t, std::vector<int64_t>> last_counts_;
  int64_t last_steps_ = 0;
  std::thread thread_;
};

}  // namespace moe

// Per-layer counts of routed tokens per expert, and the load-balance
// figures derived from them, for GetExpertStats and the metrics.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/placement.h"

namespace moe {

struct LoadBalance {
  double entropy = 0;             // nats, of the load distribution
  double normalized_entropy = 0;  // entropy / ln(E); 1 = perfectly even
  double gini = 0;                // 0 = even, -> 1 = all on one expert
  double max_over_mean = 0;
  double min_over_mean = 0;
};
LoadBalance ComputeLoadBalance(absl::Span<const int64_t> counts);

// Reads, per MoE layer, the tokens routed to each expert from the JSON that
// `moe-cli stats --save` writes (GetExpertStats of each layer, one object or an
// array of them; `tokens_per_expert` or `tokensPerExpert`, numbers or the
// strings proto JSON writes for int64). INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<std::map<int64_t, std::vector<double>>> ExpertLoadFromJson(
    const std::string& text);

// Holds one layer's figures since start or the last reset (what GetExpertStats
// answers).
struct LayerStats {
  int64_t layer = 0;
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t dropped_slots = 0;
  std::vector<int64_t> tokens_per_expert;
  LoadBalance balance;
  std::vector<int64_t> rows_per_worker;  // empty without workers
  double worker_max_over_mean = 0;       // 0 before any step on workers
  // Holds the placement in force: the logical expert in each slot of each
  // worker, and each expert's replicas (both empty without a placement).
  std::vector<std::vector<int32_t>> placement;
  std::vector<int32_t> replicas_per_expert;
};

class ExpertStatsBook {
 public:
  explicit ExpertStatsBook(int64_t num_experts) : experts_(num_experts) {}
  // `worker_rows` holds the rows each worker computed in this step (empty
  // without workers).
  void Record(int64_t layer, absl::Span<const int64_t> counts, int64_t tokens,
              int64_t dropped, absl::Span<const int64_t> worker_rows = {});
  LayerStats Snapshot(int64_t layer, bool reset);
  // Returns the load balance of the counts since start or the last reset.
  LoadBalance Balance(int64_t layer);
  // Returns, per step, the most loaded worker's rows over the mean, averaged
  // since start or the last reset (0 before any step on workers).
  double WorkerImbalance(int64_t layer);
  // Sets the placement in force, which every snapshot reports.
  void SetPlacement(std::shared_ptr<const ExpertPlacement> placement);
  // Returns the steps of every layer since start (resets do not zero it).
  int64_t TotalSteps();
  // Returns the tokens per expert of every layer seen since start or the last
  // reset.
  std::map<int64_t, std::vector<int64_t>> Counts();

 private:
  struct Layer {
    int64_t steps = 0;
    int64_t tokens = 0;
    int64_t dropped = 0;
    std::vector<int64_t> counts;
    std::vector<int64_t> worker_rows;
    // Holds the sum, over the steps with rows, of max worker rows / mean
    // worker rows.
    double worker_imbalance = 0;
    int64_t worker_steps = 0;
  };
  const int64_t experts_;
  absl::Mutex mu_;
  std::shared_ptr<const ExpertPlacement> placement_ ABSL_GUARDED_BY(mu_);
  int64_t steps_ever_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Layer> layers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe

// Per-layer counts of routed tokens per expert, and the load-balance
// figures derived from them, for GetExpertStats and the metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/types/span.h"
#include "moe/v1/moe.pb.h"

namespace moe {

struct LoadBalance {
  double entropy = 0;             // nats, of the load distribution
  double normalized_entropy = 0;  // entropy / ln(E); 1 = perfectly even
  double gini = 0;                // 0 = even, -> 1 = all on one expert
  double max_over_mean = 0;
  double min_over_mean = 0;
};
LoadBalance ComputeLoadBalance(absl::Span<const int64_t> counts);

class ExpertStatsBook {
 public:
  explicit ExpertStatsBook(int64_t num_experts) : experts_(num_experts) {}
  void Record(int64_t layer, absl::Span<const int64_t> counts, int64_t tokens,
              int64_t dropped);
  moe::v1::ExpertStats Snapshot(int64_t layer, bool reset);
  // Load balance of the counts since start or the last reset.
  LoadBalance Balance(int64_t layer);

 private:
  struct Layer {
    int64_t steps = 0;
    int64_t tokens = 0;
    int64_t dropped = 0;
    std::vector<int64_t> counts;
  };
  int64_t experts_;
  std::mutex mu_;
  std::map<int64_t, Layer> layers_;
};

}  // namespace moe

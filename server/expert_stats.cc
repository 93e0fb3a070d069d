#include "server/expert_stats.h"

#include <algorithm>
#include <cmath>

namespace moe {

LoadBalance ComputeLoadBalance(absl::Span<const int64_t> counts) {
  LoadBalance b;
  const double n = static_cast<double>(counts.size());
  double total = 0;
  for (int64_t c : counts) total += static_cast<double>(c);
  if (counts.empty() || total <= 0) return b;
  const double mean = total / n;
  for (int64_t c : counts) {
    if (c > 0) {
      const double p = c / total;
      b.entropy -= p * std::log(p);
    }
  }
  b.normalized_entropy = n > 1 ? b.entropy / std::log(n) : 1.0;
  std::vector<int64_t> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  // Gini = sum_i (2i - n - 1) x_(i) / (n * sum x), i = 1..n ascending.
  double acc = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    acc += (2.0 * (i + 1) - n - 1) * static_cast<double>(sorted[i]);
  }
  b.gini = acc / (n * total);
  b.max_over_mean = sorted.back() / mean;
  b.min_over_mean = sorted.front() / mean;
  return b;
}

void ExpertStatsBook::Record(int64_t layer, absl::Span<const int64_t> counts,
                             int64_t tokens, int64_t dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  Layer& l = layers_[layer];
  if (l.counts.empty()) l.counts.assign(experts_, 0);
  ++l.steps;
  l.tokens += tokens;
  l.dropped += dropped;
  for (size_t e = 0; e < counts.size() && e < l.counts.size(); ++e) {
    l.counts[e] += counts[e];
  }
}

LoadBalance ExpertStatsBook::Balance(int64_t layer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = layers_.find(layer);
  return it == layers_.end() ? LoadBalance()
                             : ComputeLoadBalance(it->second.counts);
}

moe::v1::ExpertStats ExpertStatsBook::Snapshot(int64_t layer, bool reset) {
  std::lock_guard<std::mutex> lock(mu_);
  Layer& l = layers_[layer];
  if (l.counts.empty()) l.counts.assign(experts_, 0);
  moe::v1::ExpertStats s;
  s.set_layer(static_cast<int32_t>(layer));
  s.set_steps(l.steps);
  s.set_tokens(l.tokens);
  s.set_dropped_slots(l.dropped);
  for (int64_t c : l.counts) s.add_tokens_per_expert(c);
  const LoadBalance b = ComputeLoadBalance(l.counts);
  s.set_entropy(b.entropy);
  s.set_normalized_entropy(b.normalized_entropy);
  s.set_gini(b.gini);
  s.set_max_over_mean(b.max_over_mean);
  s.set_min_over_mean(b.min_over_mean);
  if (reset) l = Layer();
  return s;
}

}  // namespace moe

#include "server/step/expert_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

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

absl::StatusOr<std::map<int64_t, std::vector<double>>> ExpertLoadFromJson(
    const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !(j.is_object() || j.is_array())) {
    return absl::InvalidArgumentError(
        "expert load: not a JSON object or array of GetExpertStats");
  }
  const nlohmann::json list = j.is_array() ? j : nlohmann::json::array({j});
  auto number = [](const nlohmann::json& v, double* out) {
    if (v.is_number()) {
      *out = v.get<double>();
      return *out >= 0;
    }
    return v.is_string() && absl::SimpleAtod(v.get<std::string>(), out) &&
           *out >= 0;
  };
  std::map<int64_t, std::vector<double>> load;
  for (const nlohmann::json& s : list) {
    if (!s.is_object()) {
      return absl::InvalidArgumentError("expert load: an entry is no object");
    }
    double layer = 0;  // proto JSON leaves out a zero layer
    if (s.contains("layer") && !number(s["layer"], &layer)) {
      return absl::InvalidArgumentError("expert load: bad \"layer\"");
    }
    const char* key = s.contains("tokens_per_expert") ? "tokens_per_expert"
                                                      : "tokensPerExpert";
    if (!s.contains(key) || !s[key].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert load: layer ", layer, " has no tokens_per_expert array"));
    }
    std::vector<double>& l = load[static_cast<int64_t>(layer)];
    for (const nlohmann::json& v : s[key]) {
      double c = 0;
      if (!number(v, &c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "expert load: layer ", layer, ": tokens_per_expert entry ",
            v.dump(), " is not a count"));
      }
      l.push_back(c);
    }
  }
  return load;
}

void ExpertStatsBook::Record(int64_t layer, absl::Span<const int64_t> counts,
                             int64_t tokens, int64_t dropped,
                             absl::Span<const int64_t> worker_rows) {
  absl::MutexLock lock(&mu_);
  Layer& l = layers_[layer];
  if (l.counts.empty()) l.counts.assign(experts_, 0);
  ++l.steps;
  ++steps_ever_;
  l.tokens += tokens;
  l.dropped += dropped;
  for (size_t e = 0; e < counts.size() && e < l.counts.size(); ++e) {
    l.counts[e] += counts[e];
  }
  if (worker_rows.empty()) return;
  if (l.worker_rows.size() != worker_rows.size()) {
    l.worker_rows.assign(worker_rows.size(), 0);
  }
  int64_t total = 0, most = 0;
  for (size_t q = 0; q < worker_rows.size(); ++q) {
    l.worker_rows[q] += worker_rows[q];
    total += worker_rows[q];
    most = std::max(most, worker_rows[q]);
  }
  if (total > 0) {
    l.worker_imbalance += static_cast<double>(most) * worker_rows.size() /
                          static_cast<double>(total);
    ++l.worker_steps;
  }
}

double ExpertStatsBook::WorkerImbalance(int64_t layer) {
  absl::MutexLock lock(&mu_);
  auto it = layers_.find(layer);
  if (it == layers_.end() || it->second.worker_steps == 0) return 0;
  return it->second.worker_imbalance / it->second.worker_steps;
}

void ExpertStatsBook::SetPlacement(
    std::shared_ptr<const ExpertPlacement> placement) {
  absl::MutexLock lock(&mu_);
  placement_ = std::move(placement);
}

int64_t ExpertStatsBook::TotalSteps() {
  absl::MutexLock lock(&mu_);
  return steps_ever_;
}

std::map<int64_t, std::vector<int64_t>> ExpertStatsBook::Counts() {
  absl::MutexLock lock(&mu_);
  std::map<int64_t, std::vector<int64_t>> out;
  for (const auto& [layer, l] : layers_) out[layer] = l.counts;
  return out;
}

LoadBalance ExpertStatsBook::Balance(int64_t layer) {
  absl::MutexLock lock(&mu_);
  auto it = layers_.find(layer);
  return it == layers_.end() ? LoadBalance()
                             : ComputeLoadBalance(it->second.counts);
}

LayerStats ExpertStatsBook::Snapshot(int64_t layer, bool reset) {
  absl::MutexLock lock(&mu_);
  Layer& l = layers_[layer];
  if (l.counts.empty()) l.counts.assign(experts_, 0);
  LayerStats s;
  s.layer = layer;
  s.steps = l.steps;
  s.tokens = l.tokens;
  s.dropped_slots = l.dropped;
  s.tokens_per_expert = l.counts;
  s.balance = ComputeLoadBalance(l.counts);
  s.rows_per_worker = l.worker_rows;
  if (l.worker_steps > 0) {
    s.worker_max_over_mean = l.worker_imbalance / l.worker_steps;
  }
  if (placement_ != nullptr) {
    if (auto it = placement_->layers.find(layer);
        it != placement_->layers.end()) {
      s.placement = it->second.workers;
      const ReplicaMap m = MakeReplicaMap(it->second, experts_);
      for (int64_t e = 0; e < experts_; ++e) {
        s.replicas_per_expert.push_back(static_cast<int32_t>(m.replicas(e)));
      }
    }
  }
  if (reset) l = Layer();
  return s;
}

}  // namespace moe

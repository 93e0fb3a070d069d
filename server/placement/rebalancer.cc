#include "server/placement/rebalancer.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status_macros.h"

namespace moe {

Rebalancer::Rebalancer(Options options)
    : options_(std::move(options)), placements_(options_.placements) {
  thread_ = std::thread([this] { Loop(); });
}

Rebalancer::~Rebalancer() {
  std::deque<Done> left;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    left.swap(requests_);
  }
  thread_.join();
  for (auto& done : left) done(absl::UnavailableError("router shutting down"));
}

void Rebalancer::Request(Done done) {
  bool stopped = false;
  {
    absl::MutexLock lock(&mu_);
    stopped = stop_;
    if (!stopped && requests_.size() < kMaxQueuedRequests) {
      requests_.push_back(std::move(done));
      return;
    }
  }
  if (stopped) {
    done(absl::UnavailableError("router shutting down"));
    return;
  }
  done(absl::ResourceExhaustedError(absl::StrCat(
      "rebalance: ", kMaxQueuedRequests,
      " requests already wait behind the one running; ask again when one is "
      "answered")));
}

void Rebalancer::Loop() {
  const auto asked = [this] {
    mu_.AssertReaderHeld();
    return stop_ || !requests_.empty();
  };
  mu_.Lock();
  while (!stop_) {
    // The thread wakes when asked, and every 50 ms to poll for
    // --rebalance-every-steps.
    mu_.AwaitWithTimeout(absl::Condition(&asked), absl::Milliseconds(50));
    if (stop_) break;
    Done done;
    const int64_t steps = options_.stats->TotalSteps();
    if (!requests_.empty()) {
      done = std::move(requests_.front());
      requests_.pop_front();
    } else if (options_.every_steps <= 0 ||
               steps - last_steps_ < options_.every_steps) {
      continue;
    }
    mu_.Unlock();
    auto result = RunOnce();
    if (done) {
      done(result);
    } else if (!result.ok()) {
      spdlog::warn("rebalance: {}", result.status().ToString());
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

absl::StatusOr<std::shared_ptr<const ExpertPlacement>>
Rebalancer::NextPlacement() {
  const int64_t E = options_.info.layer.num_experts;
  const std::shared_ptr<const ExpertPlacement> now = placements_->Current();
  std::map<int64_t, std::vector<int64_t>> counts = options_.stats->Counts();
  auto next = std::make_shared<ExpertPlacement>();
  next->redundant = options_.redundant;
  for (int64_t layer : options_.info.moe_layers) {
    std::vector<double> load(E, 0);
    double total = 0;
    const std::vector<int64_t>& c = counts[layer];
    const std::vector<int64_t>& before = last_counts_[layer];
    // Only the load since the last rebalance counts; after a stats reset all of
    // it does.
    bool reset = before.size() != c.size();
    for (size_t e = 0; e < c.size() && !reset; ++e) reset = c[e] < before[e];
    for (size_t e = 0; e < c.size() && e < load.size(); ++e) {
      load[e] = static_cast<double>(reset ? c[e] : c[e] - before[e]);
      total += load[e];
    }
    if (total <= 0 && now != nullptr && now->layers.count(layer) > 0) {
      next->layers[layer] = now->layers.at(layer);  // nothing new
      continue;
    }
    MOE_ASSIGN_OR_RETURN(
        next->layers[layer],
        ComputePlacement(load, options_.world, options_.redundant));
  }
  last_counts_ = std::move(counts);
  return std::shared_ptr<const ExpertPlacement>(std::move(next));
}

absl::StatusOr<RebalanceOutcome> Rebalancer::RunOnce() {
  const auto start = std::chrono::steady_clock::now();
  last_steps_ = options_.stats->TotalSteps();
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<const ExpertPlacement> next,
                       NextPlacement());
  uint64_t epoch = 0;
  absl::Status s = placements_->Switch(next, start + options_.timeout, &epoch);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (options_.metrics != nullptr)
    options_.metrics->Rebalanced(s.ok(), seconds);
  if (!s.ok()) return s;
  options_.stats->SetPlacement(next);
  if (options_.metrics != nullptr) {
    options_.metrics->Placement(*next, options_.info.layer.num_experts);
  }
  spdlog::info("rebalanced to placement {} in {:.3f} s: {}", epoch, seconds,
               PlacementToJson(*next));
  return RebalanceOutcome{epoch, seconds};
}

}  // namespace moe

#include "server/group/placement_switch.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

PlacementInForce PlacementSwitch::in_force() const {
  absl::MutexLock lock(&mu_);
  return {placement_, epoch_};
}

absl::StatusOr<uint64_t> PlacementSwitch::Begin(uint64_t generation,
                                                int world) {
  absl::MutexLock lock(&mu_);
  if (staging_.active) {
    return absl::FailedPreconditionError(
        absl::StrCat("placement ", staging_.epoch, " is still loading"));
  }
  staging_ = Staging();
  staging_.active = true;
  staging_.epoch = ++next_epoch_;
  staging_.generation = generation;
  staging_.loaded.assign(world, false);
  staging_.remaining = world;
  return staging_.epoch;
}

void PlacementSwitch::Loaded(uint64_t generation, uint64_t epoch, int rank,
                             const std::string& error) {
  absl::MutexLock lock(&mu_);
  if (!staging_.active || epoch != staging_.epoch ||
      generation != staging_.generation || rank < 0 ||
      rank >= static_cast<int>(staging_.loaded.size())) {
    return;
  }
  if (!error.empty()) {
    if (staging_.error.empty()) {
      staging_.error =
          absl::StrCat("worker rank ", rank, " could not load placement ",
                       epoch, ": ", error);
    }
  } else if (!staging_.loaded[rank]) {
    staging_.loaded[rank] = true;
    --staging_.remaining;
  }
}

void PlacementSwitch::GenerationStarted(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  if (staging_.active && staging_.error.empty()) {
    staging_.error =
        absl::StrCat("worker group reconfigured (generation ", generation,
                     ") while loading placement ", staging_.epoch);
  }
}

absl::Status PlacementSwitch::AwaitLoaded(
    std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || staging_.remaining == 0 || !staging_.error.empty();
  };
  mu_.AwaitWithTimeout(
      absl::Condition(&settled),
      absl::FromChrono(deadline - std::chrono::steady_clock::now()));
  absl::Status status;
  if (shutdown_) {
    status = absl::UnavailableError("router shutting down");
  } else if (!staging_.error.empty()) {
    status = absl::UnavailableError(staging_.error);
  } else if (staging_.remaining > 0) {
    status = absl::DeadlineExceededError(
        absl::StrCat(staging_.remaining, " worker(s) still loading placement ",
                     staging_.epoch));
  }
  if (!status.ok()) staging_.active = false;
  return status;
}

absl::Status PlacementSwitch::Commit(
    std::shared_ptr<const ExpertPlacement> next, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  staging_.active = false;
  if (staging_.generation != generation || !staging_.error.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "worker group reconfigured while loading placement ", staging_.epoch));
  }
  placement_ = std::move(next);
  epoch_ = staging_.epoch;
  spdlog::info("expert placement {} in force", epoch_);
  return absl::OkStatus();
}

void PlacementSwitch::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace moe

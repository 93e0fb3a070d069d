#include "server/group/worker_pool.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "server/group/group_roster.h"

namespace moe {

using Clock = std::chrono::steady_clock;

WorkerPool::WorkerPool(WorkerPoolOptions options)
    : options_(std::move(options)),
      placement_(options_.placement),
      group_(options_, &channel_, &placement_) {}

absl::Status WorkerPool::OpenStep(const std::vector<StepContent>& steps,
                                  StepRanks::Open open) {
  const int P = static_cast<int>(steps.size());
  return group_.Read([&](const GroupRoster& roster) {
    const GroupRoster::Members& ranks = roster.ranks();
    if (!roster.ready()) {
      return absl::UnavailableError(NotReady(roster, Clock::now()));
    }
    if (P != static_cast<int>(ranks.size())) {
      return absl::UnavailableError(
          absl::StrCat("worker group re-formed with ", ranks.size(),
                       " workers while a step for ", P, " was planned; retry"));
    }
    const uint64_t epoch = placement_.in_force().epoch;
    if (!steps.empty() && steps[0].placement_epoch != epoch) {
      return PlacementChangedError(steps[0].placement_epoch, epoch);
    }
    open(roster.generation(),
         std::vector<std::shared_ptr<StepRank>>(ranks.begin(), ranks.end()));
    return absl::OkStatus();
  });
}

absl::Status WorkerPool::RunStep(const std::vector<StepContent>& steps,
                                 Clock::time_point deadline,
                                 const std::function<void()>& overlap,
                                 std::vector<StepReply>* results) {
  const StepChannel::Outcome sent =
      channel_.Run(steps, deadline, overlap, results);
  const StepTracker::Outcome& outcome = sent.step;
  if (outcome.status.ok()) return outcome.status;
  // Rebuild the group unless the step left it intact (StepTracker) or a
  // disconnect or a new generation already took care of it.
  const bool regroup = group_.Read([&](const GroupRoster& roster) {
    return !outcome.intact && outcome.generation == roster.generation() &&
           roster.ready();
  });
  if (regroup) {
    spdlog::warn("step {} failed ({}); rebuilding the worker group", sent.id,
                 outcome.status.ToString());
    group_.Regroup(/*delayed=*/false);
  }
  return outcome.status;
}

WorkerPool::PlacementInForce WorkerPool::placement() const {
  return group_.Read([&](const GroupRoster& roster) {
    PlacementInForce p = placement_.in_force();
    // A degraded group runs without it (its assignments split evenly).
    if (static_cast<int>(roster.ranks().size()) != options_.world_size) {
      p.placement = nullptr;
    }
    return p;
  });
}

absl::Status WorkerPool::Rebalance(std::shared_ptr<const ExpertPlacement> next,
                                   Clock::time_point deadline,
                                   uint64_t* epoch_out) {
  const int P = options_.world_size;
  for (const auto& [layer, lp] : next->layers) {
    if (lp.world() != P) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement of layer ", layer, " is for ", lp.world(),
                       " workers, the group has ", P));
    }
  }
  uint64_t epoch = 0;
  MOE_RETURN_IF_ERROR(group_.Reconfigure([&](const GroupRoster& roster,
                                             WorkerGroup::Effects* fx) {
    const GroupRoster::Members& ranks = roster.ranks();
    if (!roster.ready()) {
      return absl::UnavailableError(
          "worker group not ready: cannot rebalance now");
    }
    if (static_cast<int>(ranks.size()) != P) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker group degraded to ", ranks.size(), " of ", P,
          " workers: the placement is not in force; rebalance once the "
          "group is whole"));
    }
    const uint64_t g = roster.generation();
    MOE_ASSIGN_OR_RETURN(epoch, placement_.Begin(g, P));
    for (int r = 0; r < P; ++r) {
      fx->out.emplace_back(
          ranks[r],
          PlacementUpdate{
              .generation = g, .rank = r, .epoch = epoch, .placement = next});
    }
    return absl::OkStatus();
  }));
  MOE_RETURN_IF_ERROR(placement_.AwaitLoaded(deadline));
  // Switch between two sends: every step sent from here on names `epoch`.
  absl::MutexLock send_lock(&channel_.send_order());
  MOE_RETURN_IF_ERROR(group_.Read([&](const GroupRoster& roster) {
    return placement_.Commit(std::move(next), roster.generation());
  }));
  if (epoch_out != nullptr) *epoch_out = epoch;
  return absl::OkStatus();
}

}  // namespace moe

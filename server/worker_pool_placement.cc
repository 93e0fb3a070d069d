// WorkerPool: the placement in force and live rebalancing (PlacementSwitch
// keeps the state; the pool sends the placements to the ranks).
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/worker_pool.h"

namespace moe {

WorkerPool::PlacementInForce WorkerPool::placement() const {
  absl::MutexLock lock(&mu_);
  PlacementInForce p = placement_.in_force();
  // A degraded group runs without it (StartGenerationLocked).
  if (static_cast<int>(roster_.ranks().size()) != options_.world_size) {
    p.placement = nullptr;
  }
  return p;
}

void WorkerPool::OnPlacementLoaded(const std::shared_ptr<GroupMember>& member,
                                   uint64_t generation, uint64_t epoch,
                                   const std::string& error) {
  absl::MutexLock lock(&mu_);
  if (!roster_.IsRank(*member)) return;
  placement_.Loaded(generation, epoch, member->rank, error);
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
  MOE_RETURN_IF_ERROR(
      Reconfigure([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const GroupRoster::Members& ranks = roster_.ranks();
        if (!roster_.ready()) {
          return absl::UnavailableError(
              "worker group not ready: cannot rebalance now");
        }
        if (static_cast<int>(ranks.size()) != P) {
          return absl::FailedPreconditionError(absl::StrCat(
              "worker group degraded to ", ranks.size(), " of ", P,
              " workers: the placement is not in force; rebalance once the "
              "group is whole"));
        }
        const uint64_t g = roster_.generation();
        MOE_ASSIGN_OR_RETURN(epoch, placement_.Begin(g, P));
        for (int r = 0; r < P; ++r) {
          fx->out.emplace_back(ranks[r], PlacementUpdate{.generation = g,
                                                         .rank = r,
                                                         .epoch = epoch,
                                                         .placement = next});
        }
        return absl::OkStatus();
      }));
  MOE_RETURN_IF_ERROR(placement_.AwaitLoaded(deadline));
  // Switch between two sends: every step sent from here on names `epoch`.
  absl::MutexLock send_lock(&channel_.send_order());
  absl::MutexLock lock(&mu_);
  MOE_RETURN_IF_ERROR(placement_.Commit(std::move(next), roster_.generation()));
  if (epoch_out != nullptr) *epoch_out = epoch;
  return absl::OkStatus();
}

}  // namespace moe

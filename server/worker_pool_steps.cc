// WorkerPool: steps on the group (its StepChannel sends them and gathers
// the replies) and whether a failed one rebuilds the group.
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "server/worker_pool.h"

namespace moe {

void WorkerPool::OnResult(const GroupMember& member, StepReply& reply) {
  absl::MutexLock lock(&mu_);
  // `member.rank` is its rank in the current generation
  // (StepTracker::Answer drops an answer to a step of another one).
  channel_.Answer(
      member.rank, [&] { return member.Name(); }, reply);
}

absl::Status WorkerPool::OpenStep(const std::vector<StepContent>& steps,
                                  StepRanks::Open open) {
  const int P = static_cast<int>(steps.size());
  absl::MutexLock lock(&mu_);
  const GroupRoster::Members& ranks = roster_.ranks();
  if (!roster_.ready()) {
    return absl::UnavailableError(roster_.NotReady(Clock::now()));
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
  open(roster_.generation(),
       std::vector<std::shared_ptr<StepRank>>(ranks.begin(), ranks.end()));
  return absl::OkStatus();
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
  bool regroup = false;
  {
    absl::MutexLock lock(&mu_);
    regroup = !outcome.intact && outcome.generation == roster_.generation() &&
              roster_.ready();
  }
  if (regroup) {
    spdlog::warn("step {} failed ({}); rebuilding the worker group", sent.id,
                 outcome.status.ToString());
    Regroup(/*delayed=*/false);
  }
  return outcome.status;
}

}  // namespace moe

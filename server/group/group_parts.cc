#include "server/group/group_parts.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

GroupParts::GroupParts(const WorkerPoolOptions& options, StepChannel* channel,
                       PlacementSwitch* placement)
    : world_size_(options.world_size),
      num_experts_(options.num_experts),
      heartbeat_interval_(options.heartbeat_interval),
      channel_(channel),
      placement_(placement),
      store_(options.max_store_waits_per_rank) {}

std::vector<GroupAssignment> GroupParts::StartGeneration(uint64_t generation,
                                                         int world) {
  std::vector<GroupAssignment> assigned =
      AssignGeneration(generation, world, world_size_, num_experts_,
                       placement_->in_force(), heartbeat_interval_);
  std::vector<std::string> tokens;
  for (const GroupAssignment& a : assigned) tokens.push_back(a.store_token);
  store_.StartGeneration(generation, std::move(tokens));
  channel_->AbortAll(absl::UnavailableError(
      absl::StrCat("worker group reconfigured (generation ", generation, ")")));
  placement_->GenerationStarted(generation);
  if (world < world_size_) {
    spdlog::warn(
        "worker group generation {}: {} ranks assigned, DEGRADED ({} of {} "
        "configured workers; experts re-split over {}); it grows back when "
        "workers return",
        generation, world, world, world_size_, world);
  } else {
    spdlog::info("worker group generation {}: {} ranks assigned", generation,
                 world);
  }
  return assigned;
}

void GroupParts::RankLeft(const std::string& name, int rank,
                          uint64_t generation) {
  channel_->AbortAll(
      absl::UnavailableError(absl::StrCat("worker ", name, " disconnected")));
  store_.EndWaits(absl::UnavailableError(
      absl::StrCat("worker ", name, " left generation ", generation)));
  store_.RevokeRank(rank);
}

void GroupParts::RankStalled(const absl::Status& status) {
  channel_->Blame(status);
  store_.EndWaits(status);
}

void GroupParts::Shutdown() {
  channel_->AbortAll(absl::UnavailableError("router shutting down"));
  store_.Shutdown();
  placement_->Shutdown();
}

}  // namespace moe

#include "server/group_membership.h"

namespace moe {

NextGeneration PlanGeneration(const std::vector<bool>& available,
                              const GroupHistory& history,
                              std::chrono::steady_clock::time_point now,
                              const GroupPolicy& policy) {
  NextGeneration next;
  next.history = history;
  for (int s = 0; s < static_cast<int>(available.size()); ++s) {
    if (available[s]) next.slots.push_back(s);
  }
  const int W = static_cast<int>(next.slots.size());
  const int P = policy.world_size;
  if (W == 0) {
    next.slots.clear();
    return next;
  }
  if (W < P) {
    // Fewer than configured: only once a full group has run and its last
    // loss is regroup_after old (then also at once when a worker returns).
    if (!history.formed_full || !history.lost_at) {
      next.slots.clear();
      return next;
    }
    const auto at = *history.lost_at + policy.regroup_after;
    if (now < at) {
      next.action = NextGeneration::Action::kWait;
      next.regroup_at = at;
      next.slots.clear();
      return next;
    }
  }
  next.action = NextGeneration::Action::kForm;
  if (W == P) {
    next.history.formed_full = true;
    next.history.lost_at.reset();
  }
  return next;
}

std::optional<std::chrono::steady_clock::time_point> RegroupAfterLoss(
    GroupHistory* history, std::chrono::steady_clock::time_point now,
    const GroupPolicy& policy) {
  history->lost_at = now;
  if (!history->formed_full) return std::nullopt;
  return now + policy.regroup_after;
}

}  // namespace moe

#include "server/group/group_membership.h"

#include <algorithm>

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

NextGeneration RegroupSchedule::Plan(const std::vector<bool>& available,
                                     Clock::time_point now) {
  NextGeneration next = PlanGeneration(available, history_, now, policy_);
  if (next.action == NextGeneration::Action::kWait) {
    at_ = at_ ? std::max(*at_, next.regroup_at) : next.regroup_at;
  } else if (next.action == NextGeneration::Action::kForm) {
    history_ = next.history;
    at_.reset();
  }
  return next;
}

bool RegroupSchedule::Lost(Clock::time_point now) {
  const auto at = RegroupAfterLoss(&history_, now, policy_);
  if (!at) return false;
  at_ = *at;
  return true;
}

void RegroupSchedule::Failed(uint64_t generation) {
  if (last_failed_ == generation) return;
  last_failed_ = generation;
  ++failed_in_a_row_;
}

void RegroupSchedule::RetryLater(Clock::time_point now) {
  const int doublings = std::clamp(failed_in_a_row_ - 1, 0, max_doublings_);
  const Clock::time_point at = now + retry_delay_ * (1 << doublings);
  at_ = at_ ? std::min(*at_, at) : at;
}

bool RegroupSchedule::Due(Clock::time_point now) {
  if (!at_ || now < *at_) return false;
  at_.reset();
  return true;
}

}  // namespace moe

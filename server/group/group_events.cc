#include "server/group/group_events.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/status_macros.h"

namespace moe {

using Clock = std::chrono::steady_clock;

GroupEvents::GroupEvents(const WorkerPoolOptions& options, GroupParts* parts,
                         std::function<void()> look_sooner)
    : liveness_{options.heartbeat_interval, options.heartbeat_misses},
      parts_(parts),
      look_sooner_(std::move(look_sooner)),
      roster_(options.world_size),
      schedule_({options.world_size, options.regroup_after},
                options.retry_delay, WorkerPoolOptions::kMaxRetryDoublings) {}

void GroupEvents::StartGeneration(Clock::time_point now, GroupOutbox* out) {
  const NextGeneration next = schedule_.Plan(roster_.Available(), now);
  // kWait: the timer forms the smaller group when the time comes.
  if (next.action == NextGeneration::Action::kWait) look_sooner_();
  if (next.action != NextGeneration::Action::kForm) return;
  roster_.StartGeneration(next.slots);
  std::vector<GroupAssignment> assigned = parts_->StartGeneration(
      roster_.generation(), static_cast<int>(next.slots.size()));
  for (size_t r = 0; r < assigned.size(); ++r) {
    out->emplace_back(roster_.ranks()[r], std::move(assigned[r]));
  }
}

void GroupEvents::Lost(Clock::time_point now) {
  if (schedule_.Lost(now)) look_sooner_();
}

absl::Status GroupEvents::Admit(const std::shared_ptr<GroupMember>& member,
                                const std::string& peer, Clock::time_point now,
                                GroupOutbox* out) {
  MOE_RETURN_IF_ERROR(roster_.Admit(member, peer));
  StartGeneration(now, out);
  return absl::OkStatus();
}

bool GroupEvents::Remove(const std::shared_ptr<GroupMember>& member,
                         Clock::time_point now) {
  const GroupRoster::Removed removed = roster_.Remove(member);
  if (removed == GroupRoster::Removed::kRank) {
    parts_->RankLeft(roster_.NameOf(*member), roster_.RankOf(*member),
                     roster_.generation());
    Lost(now);
  }
  return removed != GroupRoster::Removed::kNone;
}

bool GroupEvents::Answered(GroupMember& member) {
  if (!member.stalled) return false;
  member.stalled = false;
  spdlog::warn("worker {} answers again; rebuilding the worker group",
               roster_.NameOf(member));
  return true;
}

GroupEvents::AfterReady GroupEvents::Ready(
    const std::shared_ptr<GroupMember>& member, uint64_t generation,
    const std::string& error) {
  switch (roster_.Ready(member, generation, error)) {
    case GroupRoster::Readiness::kIgnored:
      return AfterReady::kIgnored;
    case GroupRoster::Readiness::kFailed:
      schedule_.Failed(generation);
      return AfterReady::kRetry;
    case GroupRoster::Readiness::kGroupReady:
      schedule_.Succeeded();  // steps held meanwhile go (AwaitGroup)
      return AfterReady::kDeliver;
    case GroupRoster::Readiness::kCounted:
      return AfterReady::kDeliver;
  }
  return AfterReady::kIgnored;
}

void GroupEvents::Regroup(Clock::time_point now, GroupOutbox* out) {
  roster_.Unready();
  StartGeneration(now, out);
}

void GroupEvents::RegroupLater(Clock::time_point now) {
  schedule_.RetryLater(now);
  look_sooner_();
}

GroupEvents::Round GroupEvents::Look(Clock::time_point now,
                                     std::optional<Clock::time_point> also_at) {
  Round round;
  round.wake = now;  // at once, unless nothing happened
  Clock::time_point next_check;
  const std::vector<absl::Status> stalls =
      roster_.StallSilent(now, liveness_, &next_check);
  if (!stalls.empty()) {
    round.stalled = true;
    for (const absl::Status& stall : stalls) {
      parts_->RankStalled(stall);
      Lost(now);
    }
  } else if (schedule_.Due(now)) {
    round.regroup = true;
  } else {
    round.wake = next_check;
    if (const auto at = schedule_.next())
      round.wake = std::min(round.wake, *at);
    if (also_at) round.wake = std::min(round.wake, *also_at);
  }
  return round;
}

}  // namespace moe

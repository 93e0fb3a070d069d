#include "server/worker_group.h"

#include <algorithm>
#include <optional>

#include "core/logging.h"
#include "core/status_macros.h"

namespace moe {

using Clock = std::chrono::steady_clock;

WorkerGroup::WorkerGroup(const WorkerPoolOptions& options, StepChannel* channel,
                         PlacementSwitch* placement)
    : liveness_{options.heartbeat_interval, options.heartbeat_misses},
      channel_(channel),
      parts_(options, channel, placement),
      roster_(options.world_size),
      schedule_({options.world_size, options.regroup_after},
                options.retry_delay, WorkerPoolOptions::kMaxRetryDoublings) {
  timer_.Start([this](Clock::time_point now) { return Tick(now); });
}

WorkerGroup::~WorkerGroup() { Shutdown(); }

void WorkerGroup::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    parts_.Shutdown();
    timer_.Stop();
  }
  parts_.store().FinishEnded();
}

GroupState WorkerGroup::state() const {
  absl::MutexLock lock(&mu_);
  return GroupStateOf(roster_, Clock::now());
}

absl::Status WorkerGroup::Reconfigure(Change change) {
  Effects fx;
  absl::Status status;
  {
    absl::MutexLock send_lock(&channel_->send_order());
    {
      absl::MutexLock lock(&mu_);
      status = change(roster_, &fx);
    }
    // The ended generation's waits first: a send can block on a slow
    // worker.
    parts_.store().FinishEnded();
    Send(fx.out);
  }
  if (fx.changed) notifier_.Deliver([this] { return state(); });
  return status;
}

void WorkerGroup::Settle(bool changed) {
  parts_.store().FinishEnded();
  if (changed) notifier_.Deliver([this] { return state(); });
}

void WorkerGroup::StartGenerationLocked(Effects* fx) {
  const NextGeneration next = schedule_.Plan(roster_.Available(), Clock::now());
  // kWait: the timer forms the smaller group when the time comes.
  if (next.action == NextGeneration::Action::kWait) timer_.Poke();
  if (next.action != NextGeneration::Action::kForm) return;
  roster_.StartGeneration(next.slots);
  std::vector<GroupAssignment> assigned = parts_.StartGeneration(
      roster_.generation(), static_cast<int>(next.slots.size()));
  for (size_t r = 0; r < assigned.size(); ++r) {
    fx->out.emplace_back(roster_.ranks()[r], std::move(assigned[r]));
  }
}

void WorkerGroup::LostLocked() {
  if (schedule_.Lost(Clock::now())) timer_.Poke();
}

absl::Status WorkerGroup::Admit(const std::shared_ptr<GroupMember>& member,
                                const std::string& peer) {
  return Reconfigure(
      [&](const GroupRoster&, Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (shutdown_) return absl::UnavailableError("router shutting down");
        MOE_RETURN_IF_ERROR(roster_.Admit(member, peer));
        StartGenerationLocked(fx);
        fx->changed = true;
        return absl::OkStatus();
      });
}

void WorkerGroup::Remove(const std::shared_ptr<GroupMember>& member) {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    const GroupRoster::Removed removed = roster_.Remove(member);
    changed = removed != GroupRoster::Removed::kNone;
    if (removed == GroupRoster::Removed::kRank) {
      parts_.RankLeft(roster_.NameOf(*member), roster_.RankOf(*member),
                      roster_.generation());
      LostLocked();
    }
  }
  Settle(changed);
}

void WorkerGroup::Seen(const std::shared_ptr<GroupMember>& member) {
  member->last_seen = Clock::now().time_since_epoch().count();
  if (!member->stalled) return;
  {
    absl::MutexLock lock(&mu_);
    if (!member->stalled) return;
    member->stalled = false;
    spdlog::warn("worker {} answers again; rebuilding the worker group",
                 roster_.NameOf(*member));
  }
  Regroup(/*delayed=*/false);
}

void WorkerGroup::OnReady(const std::shared_ptr<GroupMember>& member,
                          uint64_t generation, const std::string& error) {
  bool retry = false;
  {
    absl::MutexLock lock(&mu_);
    switch (roster_.Ready(member, generation, error)) {
      case GroupRoster::Readiness::kIgnored:
        return;
      case GroupRoster::Readiness::kFailed:
        schedule_.Failed(generation);
        retry = true;
        break;
      case GroupRoster::Readiness::kGroupReady:
        schedule_.Succeeded();  // steps held meanwhile go (AwaitGroup)
        break;
      case GroupRoster::Readiness::kCounted:
        break;
    }
  }
  if (retry) {
    Regroup(/*delayed=*/true);
  } else {
    notifier_.Deliver([this] { return state(); });
  }
}

absl::StatusOr<int> WorkerGroup::AwaitReady(Clock::time_point deadline,
                                            std::chrono::milliseconds hold) {
  absl::MutexLock lock(&mu_);
  if (!roster_.ready() && !shutdown_ && hold.count() > 0) {
    // Held, not failed: a regroup takes about a rendezvous, and a client
    // would only retry. Bounded by the flag and `deadline`; the
    // requests behind this step wait in the batcher's bounded queue.
    const Clock::time_point until = std::min(deadline, Clock::now() + hold);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return roster_.ready() || shutdown_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&settled),
                         absl::FromChrono(until - Clock::now()));
  }
  if (shutdown_) return absl::UnavailableError("router shutting down");
  if (!roster_.ready()) {
    return absl::UnavailableError(NotReady(roster_, Clock::now()));
  }
  return static_cast<int>(roster_.ranks().size());
}

void WorkerGroup::Regroup(bool delayed) {
  if (delayed) {
    absl::MutexLock lock(&mu_);
    schedule_.RetryLater(Clock::now());
    timer_.Poke();
    return;
  }
  Reconfigure([&](const GroupRoster&,
                  Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return absl::OkStatus();
    roster_.Unready();
    StartGenerationLocked(fx);
    fx->changed = true;
    return absl::OkStatus();
  }).IgnoreError();
}

absl::Status WorkerGroup::ParkStoreGet(uint64_t generation,
                                       const std::string& token,
                                       std::vector<std::string> keys,
                                       Clock::time_point deadline,
                                       StoreWaiter* waiter) {
  MOE_RETURN_IF_ERROR(
      parts_.store().Get(generation, token, std::move(keys), deadline, waiter));
  timer_.Poke();  // the timer keeps the timeouts
  parts_.store().FinishEnded();
  return absl::OkStatus();
}

absl::Status WorkerGroup::View(
    absl::FunctionRef<absl::Status(const GroupRoster&)> view) const {
  absl::MutexLock lock(&mu_);
  return view(roster_);
}

Clock::time_point WorkerGroup::Tick(Clock::time_point now) {
  // Parked StoreGets whose timeout passed.
  const std::optional<Clock::time_point> store_wake =
      parts_.store().Expire(now);
  parts_.store().FinishEnded();
  bool stalled = false;
  bool regroup = false;
  Clock::time_point wake = now;  // at once, unless nothing happened
  {
    absl::MutexLock lock(&mu_);
    Clock::time_point next_check;
    if (shutdown_) {
      // The timer is stopped.
    } else if (const std::vector<absl::Status> stalls =
                   roster_.StallSilent(now, liveness_, &next_check);
               !stalls.empty()) {
      stalled = true;
      for (const absl::Status& stall : stalls) {
        parts_.RankStalled(stall);
        LostLocked();
      }
    } else if (schedule_.Due(now)) {
      regroup = true;
    } else {
      wake = next_check;
      if (const auto at = schedule_.next()) wake = std::min(wake, *at);
      if (store_wake) wake = std::min(wake, *store_wake);
    }
  }
  Settle(stalled);
  if (regroup) Regroup(/*delayed=*/false);
  return wake;
}

}  // namespace moe

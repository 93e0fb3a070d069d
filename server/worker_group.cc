#include "server/worker_group.h"

#include <algorithm>
#include <optional>

#include "core/status_macros.h"

namespace moe {

using Clock = std::chrono::steady_clock;

WorkerGroup::WorkerGroup(const WorkerPoolOptions& options, StepChannel* channel,
                         PlacementSwitch* placement)
    : channel_(channel),
      parts_(options, channel, placement),
      events_(options, &parts_, [this] { timer_.Poke(); }) {
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
  return GroupStateOf(events_.roster(), Clock::now());
}

absl::Status WorkerGroup::Reconfigure(Change change) {
  Effects fx;
  absl::Status status;
  {
    absl::MutexLock send_lock(&channel_->send_order());
    {
      absl::MutexLock lock(&mu_);
      status = change(events_.roster(), &fx);
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

absl::Status WorkerGroup::Admit(const std::shared_ptr<GroupMember>& member,
                                const std::string& peer) {
  return Reconfigure([&](const GroupRoster&,
                         Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return absl::UnavailableError("router shutting down");
    MOE_RETURN_IF_ERROR(events_.Admit(member, peer, Clock::now(), &fx->out));
    fx->changed = true;
    return absl::OkStatus();
  });
}

void WorkerGroup::Remove(const std::shared_ptr<GroupMember>& member) {
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    changed = events_.Remove(member, Clock::now());
  }
  Settle(changed);
}

void WorkerGroup::Seen(const std::shared_ptr<GroupMember>& member) {
  member->last_seen = Clock::now().time_since_epoch().count();
  if (!member->stalled) return;
  {
    absl::MutexLock lock(&mu_);
    if (!events_.Answered(*member)) return;
  }
  Regroup(/*delayed=*/false);
}

void WorkerGroup::OnReady(const std::shared_ptr<GroupMember>& member,
                          uint64_t generation, const std::string& error) {
  GroupEvents::AfterReady after;
  {
    absl::MutexLock lock(&mu_);
    after = events_.Ready(member, generation, error);
  }
  if (after == GroupEvents::AfterReady::kIgnored) return;
  if (after == GroupEvents::AfterReady::kRetry) {
    Regroup(/*delayed=*/true);
  } else {
    notifier_.Deliver([this] { return state(); });
  }
}

absl::StatusOr<int> WorkerGroup::AwaitReady(Clock::time_point deadline,
                                            std::chrono::milliseconds hold) {
  absl::MutexLock lock(&mu_);
  const GroupRoster& roster = events_.roster();
  if (!roster.ready() && !shutdown_ && hold.count() > 0) {
    // Held, not failed: a regroup takes about a rendezvous, and a client
    // would only retry. Bounded by the flag and `deadline`; the
    // requests behind this step wait in the batcher's bounded queue.
    const Clock::time_point until = std::min(deadline, Clock::now() + hold);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return events_.roster().ready() || shutdown_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&settled),
                         absl::FromChrono(until - Clock::now()));
  }
  if (shutdown_) return absl::UnavailableError("router shutting down");
  if (!roster.ready()) {
    return absl::UnavailableError(NotReady(roster, Clock::now()));
  }
  return static_cast<int>(roster.ranks().size());
}

void WorkerGroup::Regroup(bool delayed) {
  if (delayed) {
    absl::MutexLock lock(&mu_);
    events_.RegroupLater(Clock::now());
    return;
  }
  Reconfigure([&](const GroupRoster&,
                  Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return absl::OkStatus();
    events_.Regroup(Clock::now(), &fx->out);
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
  return view(events_.roster());
}

Clock::time_point WorkerGroup::Tick(Clock::time_point now) {
  // Parked StoreGets whose timeout passed.
  const std::optional<Clock::time_point> store_wake =
      parts_.store().Expire(now);
  parts_.store().FinishEnded();
  GroupEvents::Round round;
  round.wake = now;  // at once while shutting down (the timer is stopped)
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_) round = events_.Look(now, store_wake);
  }
  Settle(round.stalled);
  if (round.regroup) Regroup(/*delayed=*/false);
  return round.wake;
}

}  // namespace moe

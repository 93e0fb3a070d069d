#include "server/group/worker_group.h"

#include <algorithm>
#include <optional>

#include "core/status_macros.h"

namespace moe {

using Clock = std::chrono::steady_clock;

WorkerGroup::WorkerGroup(const WorkerPoolOptions& options, StepChannel* channel,
                         PlacementSwitch* placement)
    : channel_(channel),
      placement_(placement),
      parts_(options, channel, placement),
      events_(options, &parts_, [this] { timer_.Poke(); }) {
  timer_.Start([this](Clock::time_point now) { return Tick(now); });
}

WorkerGroup::~WorkerGroup() { Shutdown(); }

void WorkerGroup::Shutdown() {
  Locked lock(this);
  if (shutdown_) return;
  shutdown_ = true;
  parts_.Shutdown();
  timer_.Stop();
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
      // The ended generation's waits are finished as the lock goes, before
      // the sends: a send can block on a slow worker.
      Locked lock(this);
      status = change(events_.roster(), &fx);
    }
    Send(fx.out);
  }
  if (fx.changed) notifier_.Deliver([this] { return state(); });
  return status;
}

void WorkerGroup::Settle(bool changed) {
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
    Locked lock(this);
    changed = events_.Remove(member, Clock::now());
  }
  Settle(changed);
}

void WorkerGroup::Seen(const std::shared_ptr<GroupMember>& member) {
  member->last_seen = Clock::now().time_since_epoch().count();
  if (!member->stalled) return;
  {
    Locked lock(this);
    if (!events_.Answered(*member)) return;
  }
  Regroup(/*delayed=*/false);
}

void WorkerGroup::OnReady(const std::shared_ptr<GroupMember>& member,
                          uint64_t generation, const std::string& error) {
  GroupEvents::AfterReady after;
  {
    Locked lock(this);
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
    Locked lock(this);
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

void WorkerGroup::OnResult(const GroupMember& member, StepReply& reply) {
  Locked lock(this);
  const GroupRoster& roster = events_.roster();
  channel_->Answer(
      roster.RankOf(member), [&] { return roster.NameOf(member); }, reply);
}

void WorkerGroup::OnPlacementLoaded(const GroupMember& member,
                                    uint64_t generation, uint64_t epoch,
                                    const std::string& error) {
  Locked lock(this);
  if (const int rank = events_.roster().RankOf(member); rank >= 0) {
    placement_->Loaded(generation, epoch, rank, error);
  }
}

absl::Status WorkerGroup::ParkStoreGet(uint64_t generation,
                                       const std::string& token,
                                       std::vector<std::string> keys,
                                       Clock::time_point deadline,
                                       StoreWaiter* waiter) {
  MOE_RETURN_IF_ERROR(
      parts_.store().Get(generation, token, std::move(keys), deadline, waiter));
  timer_.Poke();  // the timer keeps the timeouts
  return absl::OkStatus();
}

Clock::time_point WorkerGroup::Tick(Clock::time_point now) {
  // Ends the parked StoreGets whose timeout passed.
  const std::optional<Clock::time_point> store_wake =
      parts_.store().Expire(now);
  GroupEvents::Round round;
  round.wake = now;  // at once while shutting down (the timer is stopped)
  {
    Locked lock(this);
    if (!shutdown_) round = events_.Look(now, store_wake);
  }
  Settle(round.stalled);
  if (round.regroup) Regroup(/*delayed=*/false);
  return round.wake;
}

}  // namespace moe

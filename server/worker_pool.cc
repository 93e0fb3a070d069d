#include "server/worker_pool.h"

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/even_split.h"
#include "core/logging.h"
#include "core/status_macros.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point LastSeen(const GroupMember& member) {
  return Clock::time_point(Clock::duration(member.last_seen.load()));
}

// A fresh secret per rank and generation.
std::string NewToken() {
  static absl::Mutex mu(absl::kConstInit);
  static std::random_device rd;
  absl::MutexLock lock(&mu);
  std::string t(16, '\0');
  for (char& c : t) c = static_cast<char>(rd() & 0xff);
  return t;
}

}  // namespace

WorkerPool::WorkerPool(WorkerPoolOptions options)
    : options_(std::move(options)),
      policy_{options_.world_size, options_.regroup_after},
      liveness_{options_.heartbeat_interval, options_.heartbeat_misses},
      store_(options_.max_store_waits_per_rank),
      placement_(options_.placement) {
  {
    absl::MutexLock lock(&mu_);
    members_.resize(options_.world_size);
  }
  timer_.Start([this](Clock::time_point now) { return Tick(now); });
}

WorkerPool::~WorkerPool() { Shutdown(); }

void WorkerPool::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    channel_.AbortAll(absl::UnavailableError("router shutting down"));
    store_.Shutdown();
    placement_.Shutdown();
    timer_.Stop();
  }
  store_.FinishEnded();
}

WorkerPool::State WorkerPool::state() const {
  absl::MutexLock lock(&mu_);
  return StateLocked();
}

WorkerPool::State WorkerPool::StateLocked() const {
  State s;
  s.world_size = options_.world_size;
  s.group_size = static_cast<int>(ranks_.size());
  for (const auto& c : members_) s.connected += c != nullptr;
  s.ready_workers = ready_count_;
  s.ready = ready_;
  s.generation = generation_;
  s.refusal = ready_ ? "" : refusal_;
  s.stalled = StalledLocked();
  return s;
}

void WorkerPool::SetStateCallback(std::function<void(const State&)> callback) {
  absl::MutexLock lock(&mu_);
  state_callback_ = std::move(callback);
}

void WorkerPool::NotifyLocked(Notify* notify) {
  if (!state_callback_) return;
  // The callback reads the state when it runs, under notify_mu_: two
  // notifications racing out of order still leave the latest state shown.
  notify->push_back([this, cb = state_callback_] {
    absl::MutexLock lock(&notify_mu_);
    cb(state());
  });
}

GroupAssignment WorkerPool::AssignmentLocked(
    int r, int W, const std::string& store_token) const {
  // The placement is made for the configured P workers: a smaller group
  // (degraded, see regroup_after) splits the experts evenly instead, and
  // the placement is back in force when the group is whole again.
  PlacementInForce in_force = placement_.in_force();
  const int64_t E = options_.num_experts;
  return {.generation = generation_,
          .rank = r,
          .world_size = W,
          .expert_begin = SplitBegin(r, W, E),
          .expert_end = SplitBegin(r + 1, W, E),
          .placement_epoch = in_force.epoch,
          .placement = W == options_.world_size ? std::move(in_force.placement)
                                                : nullptr,
          .heartbeat_interval = options_.heartbeat_interval,
          .store_token = store_token};
}

void WorkerPool::StartGenerationLocked(Outbox* out) {
  std::vector<bool> available(members_.size());
  for (size_t s = 0; s < members_.size(); ++s) {
    available[s] = members_[s] != nullptr && !members_[s]->stalled;
  }
  const NextGeneration next =
      PlanGeneration(available, history_, Clock::now(), policy_);
  if (next.action == NextGeneration::Action::kNone) return;
  if (next.action == NextGeneration::Action::kWait) {
    if (!regroup_pending_ || regroup_at_ < next.regroup_at) {
      regroup_at_ = next.regroup_at;
    }
    regroup_pending_ = true;
    timer_.Poke();
    return;
  }
  history_ = next.history;
  ++generation_;
  ready_count_ = 0;
  regroup_pending_ = false;
  for (const auto& c : members_) {
    if (c == nullptr) continue;
    // Left out of this generation: no rank, no store token, no heartbeat
    // watch (it is already known to be stalled).
    c->rank = -1;
    c->assigned = false;
  }
  ranks_.clear();
  for (int s : next.slots) ranks_.push_back(members_[s]);
  const int P = options_.world_size;
  const int W = static_cast<int>(ranks_.size());
  std::vector<std::string> tokens(W);
  for (int r = 0; r < W; ++r) {
    ranks_[r]->rank = r;
    ranks_[r]->assigned = true;
    tokens[r] = NewToken();
    out->emplace_back(ranks_[r], AssignmentLocked(r, W, tokens[r]));
  }
  // The ended generation's rendezvous, steps and placement loading end.
  store_.StartGeneration(generation_, std::move(tokens));
  channel_.AbortAll(absl::UnavailableError(absl::StrCat(
      "worker group reconfigured (generation ", generation_, ")")));
  placement_.GenerationStarted(generation_);
  if (W < P) {
    spdlog::warn(
        "worker group generation {}: {} ranks assigned, DEGRADED ({} of {} "
        "configured workers; experts re-split over {}); it grows back when "
        "workers return",
        generation_, W, W, P, W);
  } else {
    spdlog::info("worker group generation {}: {} ranks assigned", generation_,
                 W);
  }
}

void WorkerPool::LostLocked() {
  const auto at = RegroupAfterLoss(&history_, Clock::now(), policy_);
  if (!at) return;
  // The timer forms the smaller group when the time comes.
  regroup_pending_ = true;
  regroup_at_ = *at;
  timer_.Poke();
}

void WorkerPool::Send(Outbox& out) {
  for (auto& [member, msg] : out) {
    if (const auto* a = std::get_if<GroupAssignment>(&msg)) {
      member->Assign(*a);
    } else {
      member->SendPlacement(std::get<PlacementUpdate>(msg));
    }
  }
}

absl::Status WorkerPool::AdmitLocked(const std::shared_ptr<GroupMember>& conn,
                                     const std::string& peer) {
  if (shutdown_) return absl::UnavailableError("router shutting down");
  absl::Status refused = CheckCollectiveHost(conn->info, peer);
  if (refused.ok()) {
    std::vector<RegisteredWorker> registered;
    for (const auto& c : members_) {
      if (c != nullptr) registered.push_back({&c->info, c->Name()});
    }
    refused = CheckDevice(conn->info, registered);
  }
  if (!refused.ok()) {
    // Refused before it takes a rank: the group is not re-formed.
    refusal_ = std::string(refused.message());
    spdlog::error("{}", refusal_);
    return refused;
  }
  for (int i = 0; i < options_.world_size; ++i) {
    if (members_[i] == nullptr) {
      conn->slot = i;
      members_[i] = conn;
      break;
    }
  }
  if (conn->slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", options_.world_size,
                     " worker ranks are taken; retry to stand by"));
  }
  int connected = 0;
  for (const auto& c : members_) connected += c != nullptr;
  spdlog::info(
      "worker {} registered from {} ({} of {} workers connected; {} "
      "threads, {})",
      conn->Name(), peer, connected, options_.world_size, conn->threads,
      conn->info.device);
  return absl::OkStatus();
}

absl::Status WorkerPool::Admit(const std::shared_ptr<GroupMember>& member,
                               const std::string& peer) {
  Notify notify;
  {
    absl::MutexLock send_lock(&channel_.send_order());
    Outbox out;
    {
      absl::MutexLock lock(&mu_);
      MOE_RETURN_IF_ERROR(AdmitLocked(member, peer));
      StartGenerationLocked(&out);
      NotifyLocked(&notify);
    }
    // The ended generation's waits first: a send can block on a slow
    // worker.
    store_.FinishEnded();
    Send(out);
  }
  for (auto& n : notify) n();
  return absl::OkStatus();
}

void WorkerPool::Remove(const std::shared_ptr<GroupMember>& conn) {
  Notify notify;
  {
    absl::MutexLock lock(&mu_);
    if (conn->slot >= 0 && members_[conn->slot] == conn) {
      members_[conn->slot] = nullptr;
      spdlog::warn("worker {} disconnected", conn->Name());
      const bool in_group = conn->rank >= 0 &&
                            conn->rank < static_cast<int>(ranks_.size()) &&
                            ranks_[conn->rank] == conn;
      if (in_group) {
        if (conn->ready_generation == generation_ && ready_count_ > 0) {
          --ready_count_;
        }
        channel_.AbortAll(absl::UnavailableError(
            absl::StrCat("worker ", conn->Name(), " disconnected")));
        // The generation's rendezvous cannot complete without it.
        store_.EndWaits(absl::UnavailableError(absl::StrCat(
            "worker ", conn->Name(), " left generation ", generation_)));
        store_.RevokeRank(conn->rank);
        conn->assigned = false;
        ready_ = false;
        LostLocked();
      }
      NotifyLocked(&notify);
    }
  }
  store_.FinishEnded();
  for (auto& n : notify) n();
}

void WorkerPool::Seen(const std::shared_ptr<GroupMember>& conn) {
  conn->last_seen = Clock::now().time_since_epoch().count();
  if (!conn->stalled) return;
  {
    absl::MutexLock lock(&mu_);
    if (!conn->stalled) return;
    conn->stalled = false;
    spdlog::warn("worker {} answers again; rebuilding the worker group",
                 conn->Name());
  }
  Regroup(/*delayed=*/false);
}

std::string WorkerPool::StalledLocked() const {
  std::string out;
  const Clock::time_point now = Clock::now();
  for (const auto& c : members_) {
    if (c != nullptr && c->stalled) {
      absl::StrAppend(&out, NotAnswering(c->Name(), now - LastSeen(*c)));
    }
  }
  return out;
}

bool WorkerPool::CheckStallsLocked(Clock::time_point now, Notify* notify,
                                   Clock::time_point* next_check) {
  // Only a rank that was told the interval (in an assignment) is held to
  // it.
  std::vector<std::optional<Clock::time_point>> watched(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const auto& c = ranks_[r];
    if (c != nullptr && !c->stalled && c->assigned) watched[r] = LastSeen(*c);
  }
  const LivenessCheck check = CheckLiveness(watched, now, liveness_);
  *next_check = check.next_check;
  for (const LivenessCheck::Stall& stall : check.stalled) {
    GroupMember& c = *ranks_[stall.index];
    c.stalled = true;
    const absl::Status status = StallError(c.Name(), stall.silent, liveness_);
    spdlog::error("{}", status.message());
    // The silent rank is the cause: its peers' errors (a collective that
    // timed out waiting for it) are not.
    channel_.Blame(status);
    store_.EndWaits(status);
    ready_ = false;
    LostLocked();
    NotifyLocked(notify);
  }
  return !check.stalled.empty();
}

void WorkerPool::OnReady(const std::shared_ptr<GroupMember>& conn,
                         uint64_t generation, const std::string& error) {
  Notify notify;
  bool retry = false;
  {
    absl::MutexLock lock(&mu_);
    if (generation != generation_ || conn->rank < 0 ||
        ranks_[conn->rank] != conn) {
      return;
    }
    if (!error.empty()) {
      // Kept for the clients' UNAVAILABLE answers (State::refusal): without
      // it they would only see "0 ready" while the group retries.
      refusal_ =
          absl::StrCat("worker ", conn->Name(), " could not join generation ",
                       generation, ": ", error);
      if (failed_generation_ != generation_) {  // once per generation
        failed_generation_ = generation_;
        ++failed_generations_;
      }
      spdlog::warn("{}", refusal_);
      retry = true;
    } else if (conn->ready_generation != generation_) {
      conn->ready_generation = generation_;
      if (++ready_count_ == static_cast<int>(ranks_.size())) {
        spdlog::info("worker group generation {} ready ({} of {} workers)",
                     generation_, ranks_.size(), options_.world_size);
        ready_ = true;
        refusal_.clear();
        failed_generations_ = 0;  // steps held meanwhile go (AwaitGroup)
      }
      NotifyLocked(&notify);
    }
  }
  for (auto& n : notify) n();
  if (retry) Regroup(/*delayed=*/true);
}

std::string WorkerPool::NotReadyLocked() const {
  const State st = StateLocked();
  return absl::StrCat("worker group not ready: ", st.connected, " of ",
                      st.world_size, " workers connected, ", st.ready_workers,
                      " ready", StalledLocked(),
                      st.refusal.empty() ? "" : "; last refused: ", st.refusal);
}

absl::StatusOr<int> WorkerPool::AwaitGroup(Clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  if (!ready_ && !shutdown_ && options_.hold_while_regrouping.count() > 0) {
    // Held, not failed: a regroup takes about a rendezvous, and a client
    // would only retry. Bounded by the flag and `deadline`; the
    // requests behind this step wait in the batcher's bounded queue.
    const Clock::time_point until =
        std::min(deadline, Clock::now() + options_.hold_while_regrouping);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ready_ || shutdown_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&settled),
                         absl::FromChrono(until - Clock::now()));
  }
  if (shutdown_) return absl::UnavailableError("router shutting down");
  if (!ready_) return absl::UnavailableError(NotReadyLocked());
  return static_cast<int>(ranks_.size());
}

absl::Status WorkerPool::ParkStoreGet(uint64_t generation,
                                      const std::string& token,
                                      std::vector<std::string> keys,
                                      Clock::time_point deadline,
                                      StoreWaiter* waiter) {
  MOE_RETURN_IF_ERROR(
      store_.Get(generation, token, std::move(keys), deadline, waiter));
  timer_.Poke();  // the timer keeps the timeouts
  store_.FinishEnded();
  return absl::OkStatus();
}

void WorkerPool::Regroup(bool delayed) {
  if (delayed) {
    absl::MutexLock lock(&mu_);
    const int doublings = std::clamp(failed_generations_ - 1, 0,
                                     WorkerPoolOptions::kMaxRetryDoublings);
    const Clock::time_point at =
        Clock::now() + options_.retry_delay * (1 << doublings);
    // A regroup already due sooner (a lost worker's) keeps its time.
    regroup_at_ = regroup_pending_ ? std::min(regroup_at_, at) : at;
    regroup_pending_ = true;
    timer_.Poke();
    return;
  }
  Notify notify;
  absl::MutexLock send_lock(&channel_.send_order());
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    ready_ = false;
    StartGenerationLocked(&out);
    NotifyLocked(&notify);
  }
  store_.FinishEnded();  // before a send that can block on a slow worker
  Send(out);
  for (auto& n : notify) n();
}

Clock::time_point WorkerPool::Tick(Clock::time_point now) {
  // Parked StoreGets whose timeout passed.
  const std::optional<Clock::time_point> store_wake = store_.Expire(now);
  store_.FinishEnded();
  Notify notify;
  bool regroup = false;
  Clock::time_point wake = now;  // at once, unless nothing happened
  {
    absl::MutexLock lock(&mu_);
    Clock::time_point next_check;
    if (shutdown_ || CheckStallsLocked(now, &notify, &next_check)) {
      // Stalls handled: look again at once.
    } else if (regroup_pending_ && now >= regroup_at_) {
      regroup_pending_ = false;
      regroup = true;
    } else {
      wake = next_check;
      if (regroup_pending_) wake = std::min(wake, regroup_at_);
      if (store_wake) wake = std::min(wake, *store_wake);
    }
  }
  store_.FinishEnded();
  for (auto& n : notify) n();
  if (regroup) Regroup(/*delayed=*/false);
  return wake;
}

}  // namespace moe

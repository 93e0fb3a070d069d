#include "server/rendezvous_store.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

void RendezvousStore::StartGeneration(uint64_t generation,
                                      std::vector<std::string> tokens) {
  absl::MutexLock lock(&mu_);
  const uint64_t ended = generation_;
  generation_ = generation;
  tokens_ = std::move(tokens);
  keys_.clear();
  EndWaitsLocked(GenerationMismatch("StoreGet", ended, generation_));
}

void RendezvousStore::RevokeRank(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank >= 0 && rank < static_cast<int>(tokens_.size())) {
    tokens_[rank].clear();
  }
}

void RendezvousStore::EndWaits(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  EndWaitsLocked(status);
}

void RendezvousStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  EndWaitsLocked(absl::UnavailableError("router shutting down"));
}

void RendezvousStore::EndWaitsLocked(const absl::Status& status) {
  for (Wait& w : waits_) ended_.push_back({w.waiter, status, {}});
  waits_.clear();
}

void RendezvousStore::WakeLocked(Clock::time_point now) {
  std::erase_if(waits_, [&](Wait& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool all_set = std::all_of(
        w.keys.begin(), w.keys.end(),
        [&](const std::string& k)
            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return keys_.count(k) > 0; });
    if (all_set) {
      std::vector<std::string> values;
      values.reserve(w.keys.size());
      for (const auto& k : w.keys) values.push_back(keys_[k]);
      ended_.push_back({w.waiter, absl::OkStatus(), std::move(values)});
      return true;
    }
    if (now >= w.deadline) {
      ended_.push_back({w.waiter,
                        absl::DeadlineExceededError(
                            absl::StrCat("rendezvous keys of generation ",
                                         generation_, " not all set in time")),
                        {}});
      return true;
    }
    return false;
  });
}

absl::Status RendezvousStore::Set(uint64_t generation, const std::string& token,
                                  const std::string& key,
                                  const std::string& value) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const int rank = RankOfToken(tokens_, token);
    const int owner = KeyOwner(key);
    if (generation != generation_) {
      status = GenerationMismatch("StoreSet", generation, generation_);
    } else if (rank < 0) {
      status = absl::PermissionDeniedError(
          absl::StrCat("StoreSet of '", absl::CHexEscape(key),
                       "': the store token is not one of generation ",
                       generation_, "'s ranks"));
    } else if (owner != rank) {
      status = absl::PermissionDeniedError(absl::StrCat(
          "rank ", rank, " may not set '", absl::CHexEscape(key), "': ",
          owner < 0 ? "a key of no rank"
                    : absl::StrCat("rank ", owner, "'s key")));
    } else {
      keys_[key] = value;
      WakeLocked(Clock::now());
    }
  }
  if (!status.ok()) spdlog::warn("refused: {}", status.message());
  return status;
}

absl::Status RendezvousStore::Get(uint64_t generation, const std::string& token,
                                  std::vector<std::string> keys,
                                  Clock::time_point deadline,
                                  StoreWaiter* waiter) {
  absl::MutexLock lock(&mu_);
  const int rank = RankOfToken(tokens_, token);
  const int parked = static_cast<int>(
      std::count_if(waits_.begin(), waits_.end(),
                    [&](const Wait& w) { return w.rank == rank; }));
  if (shutdown_) return absl::UnavailableError("router shutting down");
  if (generation != generation_) {
    return GenerationMismatch("StoreGet", generation, generation_);
  }
  if (rank < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("StoreGet: the store token is not one of generation ",
                     generation_, "'s ranks"));
  }
  if (parked >= max_waits_per_rank_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rank ", rank, " already has ", parked,
                     " StoreGet calls waiting, the most per rank"));
  }
  waits_.push_back({waiter, std::move(keys), rank, deadline});
  // Keys already set, or a zero timeout: answered at once.
  WakeLocked(Clock::now());
  return absl::OkStatus();
}

void RendezvousStore::Cancel(StoreWaiter* waiter) {
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(waits_.begin(), waits_.end(),
                           [&](const Wait& w) { return w.waiter == waiter; });
    if (it == waits_.end()) return;  // already ended
    waits_.erase(it);
    ended_.push_back(
        {waiter, absl::CancelledError("store wait cancelled"), {}});
  }
  FinishEnded();
}

std::optional<RendezvousStore::Clock::time_point> RendezvousStore::Expire(
    Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  WakeLocked(now);
  std::optional<Clock::time_point> next;
  for (const Wait& w : waits_) {
    if (!next || w.deadline < *next) next = w.deadline;
  }
  return next;
}

void RendezvousStore::FinishEnded() {
  std::vector<Ended> ended;
  {
    absl::MutexLock lock(&mu_);
    ended.swap(ended_);
  }
  for (Ended& e : ended) e.waiter->End(e.status, std::move(e.values));
}

size_t RendezvousStore::waits() const {
  absl::MutexLock lock(&mu_);
  return waits_.size();
}

}  // namespace moe

#include "server/group/rendezvous_store.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

int KeyOwner(const std::string& key) {
  if (key == "nccl-unique-id") return 0;
  absl::string_view k = key;
  if (absl::StartsWith(k, "rank_")) k.remove_prefix(5);
  const size_t digits =
      std::find_if(k.begin(), k.end(),
                   [](char c) { return !absl::ascii_isdigit(c); }) -
      k.begin();
  if (digits == 0 || digits > 9) return -1;
  if (digits < k.size() && k[digits] != '/') return -1;
  int rank = -1;
  if (!absl::SimpleAtoi(k.substr(0, digits), &rank)) return -1;
  return rank;
}

int RankOfToken(const std::vector<std::string>& tokens,
                const std::string& token) {
  int rank = -1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    // Every rank is compared, in constant time: the token is a secret.
    const std::string& t = tokens[r];
    if (!t.empty() && t.size() == token.size() &&
        CRYPTO_memcmp(t.data(), token.data(), token.size()) == 0) {
      rank = static_cast<int>(r);
    }
  }
  return rank;
}

absl::Status GenerationMismatch(const char* what, uint64_t asked,
                                uint64_t now) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " for generation ", asked, " refused: generation ",
                   asked, asked < now ? " is over" : " has not started",
                   "; the store serves generation ", now));
}

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
  FinishEnded();
  if (!status.ok()) spdlog::warn("refused: {}", status.message());
  return status;
}

absl::Status RendezvousStore::Get(uint64_t generation, const std::string& token,
                                  std::vector<std::string> keys,
                                  Clock::time_point deadline,
                                  StoreWaiter* waiter) {
  const absl::Status status =
      Park(generation, token, std::move(keys), deadline, waiter);
  FinishEnded();
  return status;
}

absl::Status RendezvousStore::Park(uint64_t generation,
                                   const std::string& token,
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
  // A Get whose keys are already set, or whose timeout is zero, is answered at
  // once.
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
  std::optional<Clock::time_point> next;
  {
    absl::MutexLock lock(&mu_);
    WakeLocked(now);
    for (const Wait& w : waits_) {
      if (!next || w.deadline < *next) next = w.deadline;
    }
  }
  FinishEnded();
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

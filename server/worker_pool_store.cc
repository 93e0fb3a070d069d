// WorkerPool: the rendezvous store of the collectives (StoreSet, StoreGet).
#include <openssl/crypto.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "server/worker_pool.h"
#include "server/worker_pool_internal.h"

namespace moe {

using worker_pool_internal::GenerationMismatch;

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

void WorkerPool::EndWaitsLocked(const grpc::Status& status) {
  for (StoreWait* w : waits_) ended_waits_.emplace_back(w, status);
  waits_.clear();
}

void WorkerPool::WakeWaitsLocked(Clock::time_point now) {
  std::erase_if(waits_, [&](StoreWait* w) {
    bool all_set = true;
    for (const auto& k : w->req->keys()) {
      if (store_.count(k) == 0) {
        all_set = false;
        break;
      }
    }
    if (all_set) {
      for (const auto& k : w->req->keys()) w->resp->add_values(store_[k]);
      ended_waits_.emplace_back(w, grpc::Status::OK);
      return true;
    }
    if (now >= w->deadline) {
      ended_waits_.emplace_back(
          w, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("rendezvous keys of generation ",
                                       generation_, " not all set in time")));
      return true;
    }
    return false;
  });
}

void WorkerPool::FinishWaits() {
  std::vector<std::pair<StoreWait*, grpc::Status>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended.swap(ended_waits_);
  }
  for (auto& [w, status] : ended) w->Finish(status);
}

void WorkerPool::CancelWait(StoreWait* wait) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(waits_.begin(), waits_.end(), wait);
    if (it == waits_.end()) return;  // already ended
    waits_.erase(it);
    ended_waits_.emplace_back(wait, grpc::Status(grpc::StatusCode::CANCELLED,
                                                 "store wait cancelled"));
  }
  FinishWaits();
}

size_t WorkerPool::store_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_.size();
}

int WorkerPool::RankOfStoreTokenLocked(const std::string& token) const {
  int rank = -1;
  for (const auto& c : ranks_) {
    // Every rank is compared, in constant time: the token is a secret.
    if (c != nullptr && !c->store_token.empty() &&
        c->store_token.size() == token.size() &&
        CRYPTO_memcmp(c->store_token.data(), token.data(), token.size()) == 0) {
      rank = c->rank;
    }
  }
  return rank;
}

grpc::ServerUnaryReactor* WorkerPool::StoreSet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreSetRequest* req,
    moe::v1::StoreSetResponse*) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreSet")) return r;
  auto* reactor = ctx->DefaultReactor();
  grpc::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int rank = RankOfStoreTokenLocked(req->store_token());
    const int owner = KeyOwner(req->key());
    if (req->generation() != generation_) {
      status = GenerationMismatch("StoreSet", req->generation(), generation_);
    } else if (rank < 0) {
      status = grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("StoreSet of '", absl::CHexEscape(req->key()),
                       "': the store token is not one of generation ",
                       generation_, "'s ranks"));
    } else if (owner != rank) {
      status = grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("rank ", rank, " may not set '",
                       absl::CHexEscape(req->key()), "': ",
                       owner < 0 ? "a key of no rank"
                                 : absl::StrCat("rank ", owner, "'s key")));
    } else {
      store_[req->key()] = req->value();
      WakeWaitsLocked(Clock::now());
    }
    if (!status.ok()) {
      spdlog::warn("refused: {}", status.error_message());
    }
  }
  FinishWaits();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerPool::StoreGet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreGetRequest* req,
    moe::v1::StoreGetResponse* resp) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreGet")) return r;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(
                         req->timeout_ms(), 0, int64_t{24} * 3600 * 1000));
  grpc::Status refused;
  StoreWait* wait = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int rank = RankOfStoreTokenLocked(req->store_token());
    int parked = 0;
    for (const StoreWait* w : waits_) parked += w->rank == rank;
    if (shutdown_) {
      refused =
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "router shutting down");
    } else if (req->generation() != generation_) {
      refused = GenerationMismatch("StoreGet", req->generation(), generation_);
    } else if (rank < 0) {
      refused = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                             absl::StrCat("StoreGet: the store token is not "
                                          "one of generation ",
                                          generation_, "'s ranks"));
    } else if (parked >= options_.max_store_waits_per_rank) {
      refused = grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("rank ", rank, " already has ", parked,
                       " StoreGet calls waiting, the most per rank"));
    } else {
      wait = new StoreWait(this, req, resp, rank, deadline);
      waits_.push_back(wait);
      // Keys already set, or a zero timeout: answered at once.
      WakeWaitsLocked(Clock::now());
      cv_.notify_all();  // the retry thread keeps the timeouts
    }
  }
  if (wait == nullptr) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(refused);
    return reactor;
  }
  FinishWaits();
  return wait;
}

}  // namespace moe

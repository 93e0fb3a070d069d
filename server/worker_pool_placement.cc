// WorkerPool: redundant-expert placements and live rebalancing.
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "server/worker_pool.h"
#include "server/worker_pool_internal.h"

namespace moe {

WorkerPool::PlacementInForce WorkerPool::placement() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A degraded group runs without it (StartGenerationLocked).
  const bool whole = static_cast<int>(ranks_.size()) == options_.world_size;
  return {whole ? placement_ : nullptr, placement_epoch_};
}

void WorkerPool::OnPlacementLoaded(const std::shared_ptr<Conn>& conn,
                                   const moe::v1::PlacementLoaded& loaded) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!staging_.active || loaded.epoch() != staging_.epoch ||
      loaded.generation() != staging_.generation || conn->rank < 0 ||
      ranks_[conn->rank] != conn) {
    return;
  }
  if (!loaded.error().empty()) {
    if (staging_.error.empty()) {
      staging_.error =
          absl::StrCat("worker rank ", conn->rank, " could not load placement ",
                       loaded.epoch(), ": ", loaded.error());
    }
  } else if (!staging_.loaded[conn->rank]) {
    staging_.loaded[conn->rank] = true;
    --staging_.remaining;
  }
  cv_.notify_all();
}

absl::Status WorkerPool::Rebalance(std::shared_ptr<const ExpertPlacement> next,
                                   Clock::time_point deadline,
                                   uint64_t* epoch_out) {
  const int P = options_.world_size;
  for (const auto& [layer, lp] : next->layers) {
    if (lp.world() != P) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement of layer ", layer, " is for ", lp.world(),
                       " workers, the group has ", P));
    }
  }
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    Outbox out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ready_) {
        return absl::UnavailableError(
            "worker group not ready: cannot rebalance now");
      }
      if (static_cast<int>(ranks_.size()) != P) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker group degraded to ", ranks_.size(), " of ", P,
            " workers: the placement is not in force; rebalance once the "
            "group is whole"));
      }
      if (staging_.active) {
        return absl::FailedPreconditionError(
            absl::StrCat("placement ", staging_.epoch, " is still loading"));
      }
      epoch = ++next_epoch_;
      staging_ = Staging();
      staging_.active = true;
      staging_.epoch = epoch;
      staging_.generation = generation_;
      staging_.loaded.assign(P, false);
      staging_.remaining = P;
      for (int r = 0; r < P; ++r) {
        moe::v1::RouterMessage msg;
        auto* u = msg.mutable_placement();
        u->set_generation(generation_);
        u->set_epoch(epoch);
        u->set_redundant_experts(next->redundant);
        for (const auto& [layer, lp] : next->layers) {
          auto* slots = u->add_layer_slots();
          slots->set_layer(static_cast<int32_t>(layer));
          slots->mutable_experts()->Assign(lp.workers[r].begin(),
                                           lp.workers[r].end());
        }
        out.emplace_back(ranks_[r], std::move(msg));
      }
    }
    Send(out);
  }
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] {
      return shutdown_ || staging_.remaining == 0 || !staging_.error.empty();
    });
    if (shutdown_) {
      status = absl::UnavailableError("router shutting down");
    } else if (!staging_.error.empty()) {
      status = absl::UnavailableError(staging_.error);
    } else if (staging_.remaining > 0) {
      status = absl::DeadlineExceededError(absl::StrCat(
          staging_.remaining, " worker(s) still loading placement ", epoch));
    }
    if (!status.ok()) {
      staging_.active = false;
      return status;
    }
  }
  // Switch between two sends: every step sent from here on names `epoch`.
  std::lock_guard<std::mutex> send_lock(send_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (staging_.generation != generation_ || !staging_.error.empty()) {
    staging_.active = false;
    return absl::UnavailableError(absl::StrCat(
        "worker group reconfigured while loading placement ", epoch));
  }
  placement_ = std::move(next);
  placement_epoch_ = epoch;
  staging_.active = false;
  if (epoch_out != nullptr) *epoch_out = epoch;
  spdlog::info("expert placement {} in force", epoch);
  return absl::OkStatus();
}

}  // namespace moe

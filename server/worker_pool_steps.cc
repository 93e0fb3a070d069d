// WorkerPool: steps on the group and their results.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/thread_slice.h"
#include "server/worker_pool.h"
#include "server/worker_pool_internal.h"

namespace moe {

namespace {

// A worker's error as the client sees it: its code and message, with the
// rank that reported it.
absl::Status WorkerError(int rank, const moe::v1::StepResult& result) {
  const int code = result.error_code();
  const auto c =
      code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(
      c, absl::StrCat("worker rank ", rank, ": ", result.error_message()));
}

}  // namespace

bool IdleInDirectStep(const moe::v1::Step& step) {
  return step.direct() && step.rows().shape_size() > 0 &&
         step.rows().shape(0) == 0;
}

void WorkerPool::OnResult(const std::shared_ptr<Conn>& conn,
                          moe::v1::StepResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(result.step_id());
  if (it == pending_.end()) return;  // the step already failed or finished
  Pending& p = *it->second;
  // `conn->rank` is its rank in the current generation. A step of an
  // earlier one was aborted when the generation changed, and the conn's
  // rank may be past the end of that step's (smaller) group: a late
  // answer to it goes nowhere.
  const int r = conn->rank;
  if (result.generation() != p.generation || p.aborted || r < 0 ||
      r >= static_cast<int>(p.results.size()) || p.have[r]) {
    return;
  }
  p.have[r] = true;
  --p.remaining;
  if (result.error_code() != 0) {
    spdlog::warn(
        "worker {} failed step {}{}: {}", conn->Name(), result.step_id(),
        result.collectives_broken() ? " (collective group broken)" : "",
        result.error_message());
    ++p.failed;
    p.broken = p.broken || result.collectives_broken();
    if (p.status.ok()) p.status = WorkerError(r, result);
  } else {
    p.results[r].Swap(&result);
  }
  cv_.notify_all();
}

absl::Status WorkerPool::RunStep(std::vector<moe::v1::Step>& steps,
                                 Clock::time_point deadline,
                                 const std::function<void()>& overlap,
                                 std::vector<moe::v1::StepResult>* results) {
  const int P = static_cast<int>(steps.size());
  auto pending = std::make_shared<Pending>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    std::vector<std::shared_ptr<Conn>> conns;
    std::vector<bool> skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ready_) return absl::UnavailableError(NotReadyLocked());
      if (P != static_cast<int>(ranks_.size())) {
        return absl::UnavailableError(absl::StrCat(
            "worker group re-formed with ", ranks_.size(),
            " workers while a step for ", P, " was planned; retry"));
      }
      if (!steps.empty() && steps[0].placement_epoch() != placement_epoch_) {
        return PlacementChangedError(steps[0].placement_epoch(),
                                     placement_epoch_);
      }
      id = next_step_++;
      pending->generation = generation_;
      pending->results.resize(P);
      pending->have.assign(P, false);
      pending->remaining = P;
      // A direct step with no rows for a rank is not sent (its result
      // stays empty), unless the rank has had no step of this generation
      // and placement yet: a worker switches placements at the first step
      // naming the new one, and keeps one staged, so an idle worker must
      // not fall a placement behind. A direct step touches no collective,
      // so however it fails, the group stays.
      pending->direct = true;
      conns = ranks_;
      skip.assign(P, false);
      for (int r = 0; r < P; ++r) {
        pending->direct = pending->direct && steps[r].direct();
        skip[r] = IdleInDirectStep(steps[r]) &&
                  conns[r]->step_generation == generation_ &&
                  conns[r]->step_epoch == steps[r].placement_epoch();
        if (skip[r]) {
          pending->have[r] = true;
          --pending->remaining;
        }
      }
      pending_[id] = pending;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    for (int r = 0; r < P; ++r) {
      if (skip[r]) continue;
      moe::v1::RouterMessage msg;
      steps[r].set_generation(pending->generation);
      steps[r].set_step_id(id);
      steps[r].set_timeout_ms(std::max<int64_t>(left.count(), 1));
      msg.mutable_step()->Swap(&steps[r]);
      const bool written = conns[r]->Write(msg);
      // Write has serialized it: the step's buffers go back to the caller,
      // to be overwritten by the next step instead of allocated anew.
      msg.mutable_step()->Swap(&steps[r]);
      if (written) {
        conns[r]->step_generation = pending->generation;
        conns[r]->step_epoch = steps[r].placement_epoch();
      }
      if (!written) {
        std::lock_guard<std::mutex> lock(mu_);
        pending->aborted = true;
        if (pending->status.ok()) {
          pending->status = absl::UnavailableError(absl::StrCat(
              "lost worker ", conns[r]->Name(), " sending step ", id));
        }
        break;
      }
    }
  }
  if (overlap) overlap();
  absl::Status status;
  bool regroup = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A worker's collectives time out at the deadline and report it; the
    // grace covers the report's trip back. The last answer wakes this
    // thread: at once, not behind a computing one (core/thread_slice.h).
    const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
    const bool finished =
        cv_.wait_until(lock, deadline + std::chrono::seconds(1),
                       [&] { return pending->done(); });
    if (!finished) {
      std::vector<int> missing;
      for (int r = 0; r < P; ++r) {
        if (!pending->have[r]) missing.push_back(r);
      }
      const absl::Status stalled = absl::UnavailableError(
          absl::StrCat("step ", id, " timed out waiting for worker ranks [",
                       absl::StrJoin(missing, ", "), "]"));
      // The ranks that did not answer are the cause, whatever their
      // peers reported first (a collective timed out waiting for them).
      if (!pending->status.ok()) {
        spdlog::warn("{} after: {}", stalled.message(),
                     pending->status.message());
      }
      pending->status = stalled;
    }
    status = pending->status;
    pending_.erase(id);
    // The group stays only when every rank answered and every one refused
    // the step before its first collective (a deterministic rejection, such
    // as a step over the workers' limit): then no communicator moved, and
    // the next step runs at once. Anything else (a rank broken in or after
    // a collective, a rank that did not answer, a rank that went on into
    // the collectives while another refused) may leave ranks mid-collective
    // or out of step: rebuild the group, unless a disconnect or a new
    // generation already took care of it.
    const bool intact =
        finished && !pending->aborted && pending->remaining == 0 &&
        (pending->failed == P || pending->direct) && !pending->broken;
    regroup =
        !status.ok() && !intact && pending->generation == generation_ && ready_;
    if (regroup) {
      spdlog::warn("step {} failed ({}); rebuilding the worker group", id,
                   status.ToString());
    }
  }
  if (regroup) Regroup(/*delayed=*/false);
  if (!status.ok()) return status;
  results->swap(pending->results);
  return absl::OkStatus();
}

}  // namespace moe

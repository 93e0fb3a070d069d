#include "server/group/step_tracker.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/thread_slice.h"

namespace moe {
namespace {

// Returns a worker's error as the client sees it: its code and message, with
// the rank that reported it.
absl::Status WorkerError(int rank, const StepReply& reply) {
  const int code = reply.error_code;
  const auto c =
      code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(
      c, absl::StrCat("worker rank ", rank, ": ", reply.error_message));
}

}  // namespace

uint64_t StepTracker::Open(uint64_t generation,
                           const std::vector<bool>& skipped, bool direct) {
  auto p = std::make_unique<Pending>();
  const int P = static_cast<int>(skipped.size());
  p->generation = generation;
  p->results.resize(P);
  p->have = skipped;
  p->remaining = P;
  for (bool s : skipped) p->remaining -= s;
  p->direct = direct;
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_step_++;
  pending_[id] = std::move(p);
  return id;
}

void StepTracker::Answer(int r, absl::FunctionRef<std::string()> who,
                         StepReply& result) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(result.step_id);
  if (it == pending_.end()) return;  // the step already failed or finished
  Pending& p = *it->second;
  // `r` is the worker's rank in the current generation. A step of an
  // earlier one was aborted when the generation changed, and the rank may
  // be past the end of that step's (smaller) group: a late answer to it
  // goes nowhere.
  if (result.generation != p.generation || p.aborted || r < 0 ||
      r >= static_cast<int>(p.results.size()) || p.have[r]) {
    return;
  }
  p.have[r] = true;
  --p.remaining;
  if (result.error_code != 0) {
    spdlog::warn("worker {} failed step {}{}: {}", who(), result.step_id,
                 result.collectives_broken ? " (collective group broken)" : "",
                 result.error_message);
    ++p.failed;
    p.broken = p.broken || result.collectives_broken;
    if (p.status.ok()) p.status = WorkerError(r, result);
  } else {
    p.results[r] = std::move(result);
  }
}

void StepTracker::Fail(uint64_t id, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  it->second->aborted = true;
  if (it->second->status.ok()) it->second->status = status;
}

void StepTracker::AbortAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, p] : pending_) {
    if (p->done()) continue;
    p->aborted = true;
    if (p->status.ok()) p->status = status;
  }
}

void StepTracker::Blame(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, p] : pending_) {
    if (p->done() && !p->aborted) continue;
    p->aborted = true;
    p->status = status;
  }
}

StepTracker::Outcome StepTracker::Wait(
    uint64_t id, std::chrono::steady_clock::time_point deadline,
    std::vector<StepReply>* results) {
  absl::MutexLock lock(&mu_);
  Pending& p = *pending_.at(id);
  const int P = static_cast<int>(p.have.size());
  // A worker's collectives time out at the deadline and report it; the
  // grace covers the report's trip back. The last answer wakes this
  // thread: at once, not behind a computing one (core/thread_slice.h).
  const ScopedThreadRole waiting(ThreadRole::kLatency, ThreadRole::kCompute);
  const bool finished =
      mu_.AwaitWithTimeout(absl::Condition(&p, &Pending::done),
                           absl::FromChrono(deadline + std::chrono::seconds(1) -
                                            std::chrono::steady_clock::now()));
  if (!finished) {
    std::vector<int> missing;
    for (int r = 0; r < P; ++r) {
      if (!p.have[r]) missing.push_back(r);
    }
    const absl::Status stalled = absl::UnavailableError(
        absl::StrCat("step ", id, " timed out waiting for worker ranks [",
                     absl::StrJoin(missing, ", "), "]"));
    // The ranks that did not answer are the cause, whatever their peers
    // reported first (a collective timed out waiting for them).
    if (!p.status.ok()) {
      spdlog::warn("{} after: {}", stalled.message(), p.status.message());
    }
    p.status = stalled;
  }
  Outcome out;
  out.status = p.status;
  out.generation = p.generation;
  // The group stays only when every rank answered and every one refused
  // the step before its first collective (a deterministic rejection, such
  // as a step over the workers' limit): then no communicator moved, and
  // the next step runs at once. Anything else (a rank broken in or after a
  // collective, a rank that did not answer, a rank that went on into the
  // collectives while another refused) may leave ranks mid-collective or
  // out of step.
  out.intact = finished && !p.aborted && p.remaining == 0 &&
               (p.failed == P || p.direct) && !p.broken;
  if (out.status.ok()) results->swap(p.results);
  pending_.erase(id);
  return out;
}

}  // namespace moe

// WorkerPool: steps on the group and their results.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "proto/step_codec.h"
#include "server/worker_pool.h"
#include "server/worker_pool_internal.h"

namespace moe {

bool IdleInDirectStep(const StepContent& step) {
  return step.direct && step.in.tokens == 0;
}

void WorkerPool::OnResult(const std::shared_ptr<Conn>& conn,
                          moe::v1::StepResult& result) {
  // The reply views the rows where they arrived: the message itself moves
  // (no copy of its bytes) into storage the reply owns.
  auto owned = std::make_shared<moe::v1::StepResult>();
  owned->Swap(&result);
  StepReply reply = ViewStepResult(*owned);
  reply.owner = std::move(owned);
  absl::MutexLock lock(&mu_);
  // `conn->rank` is its rank in the current generation (StepTracker::Answer
  // drops an answer to a step of another one).
  steps_.Answer(
      conn->rank, [&] { return conn->Name(); }, reply);
}

std::vector<moe::v1::Step> WorkerPool::EncodeSteps(
    const std::vector<StepContent>& steps) {
  std::vector<moe::v1::Step> wire;
  {
    absl::MutexLock lock(&mu_);
    if (!spare_steps_.empty()) {
      wire.swap(spare_steps_.back());
      spare_steps_.pop_back();
    }
  }
  // Outside the locks, so that concurrent steps encode in parallel.
  wire.resize(steps.size());
  for (size_t r = 0; r < steps.size(); ++r) EncodeStep(steps[r], &wire[r]);
  return wire;
}

absl::Status WorkerPool::SendSteps(const std::vector<StepContent>& steps,
                                   std::vector<moe::v1::Step>& wire,
                                   Clock::time_point deadline, uint64_t* id,
                                   uint64_t* generation) {
  const int P = static_cast<int>(steps.size());
  absl::MutexLock send_lock(&send_mu_);
  std::vector<std::shared_ptr<Conn>> conns;
  std::vector<bool> skip(P, false);
  {
    absl::MutexLock lock(&mu_);
    if (!ready_) return absl::UnavailableError(NotReadyLocked());
    if (P != static_cast<int>(ranks_.size())) {
      return absl::UnavailableError(
          absl::StrCat("worker group re-formed with ", ranks_.size(),
                       " workers while a step for ", P, " was planned; retry"));
    }
    const uint64_t epoch = placement_.in_force().epoch;
    if (!steps.empty() && steps[0].placement_epoch != epoch) {
      return PlacementChangedError(steps[0].placement_epoch, epoch);
    }
    // A direct step with no rows for a rank is not sent (its result
    // stays empty), unless the rank has had no step of this generation
    // and placement yet: a worker switches placements at the first step
    // naming the new one, and keeps one staged, so an idle worker must
    // not fall a placement behind. A direct step touches no collective,
    // so however it fails, the group stays.
    bool direct = true;
    *generation = generation_;
    conns = ranks_;
    for (int r = 0; r < P; ++r) {
      direct = direct && steps[r].direct;
      skip[r] = IdleInDirectStep(steps[r]) &&
                conns[r]->step_generation == generation_ &&
                conns[r]->step_epoch == steps[r].placement_epoch;
    }
    *id = steps_.Open(generation_, skip, direct);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  for (int r = 0; r < P; ++r) {
    if (skip[r]) continue;
    moe::v1::RouterMessage msg;
    wire[r].set_generation(*generation);
    wire[r].set_step_id(*id);
    wire[r].set_timeout_ms(std::max<int64_t>(left.count(), 1));
    msg.mutable_step()->Swap(&wire[r]);
    const bool written = conns[r]->Write(msg);
    // Write has serialized it: the step's buffers go back to the pool, to
    // be overwritten by a later step instead of allocated anew.
    msg.mutable_step()->Swap(&wire[r]);
    if (!written) {
      steps_.Fail(
          *id, absl::UnavailableError(absl::StrCat(
                   "lost worker ", conns[r]->Name(), " sending step ", *id)));
      break;
    }
    conns[r]->step_generation = *generation;
    conns[r]->step_epoch = steps[r].placement_epoch;
  }
  return absl::OkStatus();
}

absl::Status WorkerPool::RunStep(const std::vector<StepContent>& steps,
                                 Clock::time_point deadline,
                                 const std::function<void()>& overlap,
                                 std::vector<StepReply>* results) {
  std::vector<moe::v1::Step> wire = EncodeSteps(steps);
  uint64_t id = 0, generation = 0;
  const absl::Status sent = SendSteps(steps, wire, deadline, &id, &generation);
  {
    absl::MutexLock lock(&mu_);
    spare_steps_.push_back(std::move(wire));
  }
  if (!sent.ok()) return sent;
  if (overlap) overlap();
  const StepTracker::Outcome outcome = steps_.Wait(id, deadline, results);
  if (outcome.status.ok()) return outcome.status;
  // Rebuild the group unless the step left it intact (StepTracker) or a
  // disconnect or a new generation already took care of it.
  bool regroup = false;
  {
    absl::MutexLock lock(&mu_);
    regroup = !outcome.intact && outcome.generation == generation_ && ready_;
  }
  if (regroup) {
    spdlog::warn("step {} failed ({}); rebuilding the worker group", id,
                 outcome.status.ToString());
    Regroup(/*delayed=*/false);
  }
  return outcome.status;
}

}  // namespace moe

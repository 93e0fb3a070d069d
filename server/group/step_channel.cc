#include "server/group/step_channel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe {

StepChannel::Outcome StepChannel::Run(
    const std::vector<StepContent>& steps,
    std::chrono::steady_clock::time_point deadline,
    const std::function<void()>& overlap, std::vector<StepReply>* results) {
  std::vector<EncodedStep> wire = buffers_.Take();
  // Outside the locks, so that concurrent steps encode in parallel.
  wire.resize(steps.size());
  for (size_t r = 0; r < steps.size(); ++r) wire[r].Encode(steps[r]);
  Outcome out;
  const absl::Status sent = Send(steps, wire, deadline, &out.id);
  buffers_.Give(std::move(wire));
  if (!sent.ok()) {
    out.step.status = sent;
    out.step.intact = true;  // nothing was sent
    return out;
  }
  if (overlap) overlap();
  out.step = tracker_.Wait(out.id, deadline, results);
  return out;
}

uint64_t StepChannel::OpenLocked(uint64_t generation,
                                 const std::vector<StepContent>& steps,
                                 std::vector<bool>* skip) {
  // A direct step with no rows for a rank is not sent (its result stays
  // empty), unless the rank has had no step of this generation and
  // placement yet: a worker switches placements at the first step naming
  // the new one, and keeps one staged, so an idle worker must not fall a
  // placement behind. A direct step touches no collective, so however it
  // fails, the group stays.
  const size_t P = steps.size();
  if (sent_.size() < P) sent_.resize(P);
  bool direct = true;
  for (size_t r = 0; r < P; ++r) {
    direct = direct && steps[r].direct;
    (*skip)[r] = IdleInDirectStep(steps[r]) &&
                 sent_[r].generation == generation &&
                 sent_[r].epoch == steps[r].placement_epoch;
  }
  return tracker_.Open(generation, *skip, direct);
}

absl::Status StepChannel::Send(const std::vector<StepContent>& steps,
                               std::vector<EncodedStep>& wire,
                               std::chrono::steady_clock::time_point deadline,
                               uint64_t* id) {
  const int P = static_cast<int>(steps.size());
  absl::MutexLock send_lock(&send_mu_);
  uint64_t generation = 0;
  std::vector<std::shared_ptr<StepRank>> ranks;
  std::vector<bool> skip(P, false);
  auto open = [&](uint64_t g, std::vector<std::shared_ptr<StepRank>> r)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_) {
                    generation = g;
                    ranks = std::move(r);
                    *id = OpenLocked(g, steps, &skip);
                  };
  if (absl::Status s = group_->OpenStep(steps, open); !s.ok()) return s;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  for (int r = 0; r < P; ++r) {
    if (skip[r]) continue;
    wire[r].Address(generation, *id,
                    std::max(left, std::chrono::milliseconds(1)));
    // Write serializes it: the step's buffers then go back to the pool
    // (Run), to be overwritten by a later step instead of allocated anew.
    const bool written = ranks[r]->Write(wire[r]);
    if (!written) {
      tracker_.Fail(*id, absl::UnavailableError(absl::StrCat(
                             "lost worker rank ", r, " ", ranks[r]->Name(),
                             " sending step ", *id)));
      break;
    }
    sent_[r] = {generation, steps[r].placement_epoch};
  }
  return absl::OkStatus();
}

bool IdleInDirectStep(const StepContent& step) {
  return step.direct && step.in.tokens == 0;
}

}  // namespace moe

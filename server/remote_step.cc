#include "server/remote_step.h"

#include <algorithm>

#include "absl/types/span.h"
#include "core/even_split.h"
#include "core/status_macros.h"
#include "engine/ep_plan.h"
#include "proto/step_codec.h"

namespace moe {

void RemoteStep::BuildSteps(int64_t layer, const float* x, int64_t n, int64_t H,
                            int64_t E, const Routing& r, int P,
                            const WorkerPool::PlacementInForce& placement,
                            bool bf16_result) {
  if (placement.epoch != replicas_epoch_) {
    replicas_.clear();
    replicas_epoch_ = placement.epoch;
  }
  const ReplicaMap* replicas = nullptr;
  if (placement.placement != nullptr) {
    auto it = replicas_.find(layer);
    if (it == replicas_.end()) {
      it = replicas_
               .emplace(layer, MakeReplicaMap(
                                   placement.placement->layers.at(layer), E))
               .first;
    }
    replicas = &it->second;
  }
  PlanDispatch(r, n, P, E, &expert_ids_, &counts_, replicas);
  worker_rows_ =
      RowsPerRank(counts_, P, replicas != nullptr ? replicas->physical : E);
  const int64_t S = r.slots;
  steps_.resize(P);
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    // Step id and timeout are the pool's to set.
    EncodeStep(/*step_id=*/0, layer, x + b * H, e - b, H, S,
               absl::MakeConstSpan(expert_ids_).subspan(b * S, (e - b) * S),
               expert_ids_,
               absl::MakeConstSpan(r.weight).subspan(b * S, (e - b) * S),
               counts_, /*timeout_ms=*/0, bf16_result, dispatch_, &steps_[q]);
    steps_[q].set_placement_epoch(placement.epoch);
  }
}

absl::Status RemoteStep::GatherResults(int64_t n, int64_t H, double wall_us,
                                       float* y, StageTimes* t) const {
  const int P = static_cast<int>(results_.size());
  double slowest = 0;
  int critical = 0;
  for (int q = 0; q < P; ++q) {
    const moe::v1::StepResult& res = results_[q];
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    MOE_RETURN_IF_ERROR(DecodeStepResult(res, q, e - b, H, y + b * H));
    if (res.experts_us() > results_[critical].experts_us()) critical = q;
    slowest = std::max(slowest, res.step_us());
  }
  // The stages of the worker whose experts took longest: the step's
  // critical path. Another worker's combine wait also holds the time it
  // waited for that worker's experts (uneven expert load), which is not
  // exchange overhead and is already in experts.
  if (P > 0) {
    const moe::v1::StepResult& c = results_[critical];
    t->dispatch_us = c.dispatch_us();
    t->experts_us = c.experts_us();
    t->combine_us = c.combine_us();
    WorkerStageTimes& w = t->critical_worker;
    w.rank = critical;
    w.decode_us = c.decode_us();
    w.gather_us = c.gather_us();
    w.dispatch_wait_us = c.dispatch_us() - c.gather_us();
    w.experts_us = c.experts_us();
    w.combine_wait_us = c.combine_us() - c.sum_us();
    w.sum_us = c.sum_us();
    w.step_us = c.step_us();
  }
  // What neither the workers' own clocks nor the shared expert running
  // here meanwhile cover: the messages' trips (hidden when the shared
  // expert takes longer).
  t->wire_us = std::max(0.0, wall_us - std::max(slowest, t->shared_us));
  return absl::OkStatus();
}

absl::Status RemoteStep::Run(WorkerPool& pool, int64_t layer, const float* x,
                             int64_t n, int64_t hidden, int64_t num_experts,
                             const Routing& routing, bool bf16_result,
                             std::chrono::steady_clock::time_point deadline,
                             const SharedFn& shared, StageClock& clock,
                             float* y, StageTimes* t) {
  absl::StatusOr<const float*> shared_y = nullptr;
  auto overlap = [&] {
    StageClock shared_clock;
    shared_y = shared();
    t->shared_us = shared_clock.Lap();
  };
  // A rebalance can switch placements between planning and sending: plan
  // again with the new one (each switch waits for the workers to load, so
  // this settles at once).
  absl::Status status;
  for (int attempt = 0; attempt < 8; ++attempt) {
    // The group's world size now (fewer than configured while degraded),
    // after waiting out a regroup if the router holds steps through one
    // (--hold-while-regrouping-ms). The step's own time starts after the
    // wait: holding must not eat the budget of the step it holds. A client
    // whose deadline comes first gets DEADLINE_EXCEEDED from gRPC meanwhile.
    const absl::StatusOr<int> world_size =
        pool.AwaitGroup(std::chrono::steady_clock::time_point::max());
    deadline += std::chrono::microseconds(static_cast<int64_t>(clock.Lap()));
    MOE_RETURN_IF_ERROR(world_size.status());
    BuildSteps(layer, x, n, hidden, num_experts, routing, *world_size,
               pool.placement(), bf16_result);
    t->plan_us += clock.Lap();
    status = pool.RunStep(steps_, deadline, overlap, &results_);
    if (!IsPlacementChanged(status)) break;
  }
  MOE_RETURN_IF_ERROR(status);
  MOE_RETURN_IF_ERROR(shared_y.status());
  const double wall_us = clock.Lap();
  MOE_RETURN_IF_ERROR(GatherResults(n, hidden, wall_us, y, t));
  if (*shared_y != nullptr) {
    const float* s = *shared_y;
    for (int64_t i = 0; i < n * hidden; ++i) y[i] += s[i];
  }
  // Worker stages are the slowest worker's own figures; putting the rows
  // together here counts as combine. The total is this step's wall time.
  const double assemble_us = clock.Lap();
  t->combine_us += assemble_us;
  t->total_us = t->route_us + t->plan_us + wall_us + assemble_us;
  return absl::OkStatus();
}

}  // namespace moe

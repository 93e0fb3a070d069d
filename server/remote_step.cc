#include "server/remote_step.h"

#include <algorithm>
#include <cstring>

#include "absl/types/span.h"
#include "core/even_split.h"
#include "core/status_macros.h"
#include "engine/ep_plan.h"
#include "kernels/cpu/dispatch.h"
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
  const int64_t physical = replicas != nullptr ? replicas->physical : E;
  worker_rows_ = RowsPerRank(counts_, P, physical);
  direct_ = P >= 2 && n <= options_.direct_step_tokens;
  if (direct_) {
    BuildDirectSteps(layer, x, n, H, r, P, physical, placement.epoch);
    return;
  }
  const int64_t S = r.slots;
  steps_.resize(P);
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    // Step id and timeout are the pool's to set.
    EncodeStep(
        /*step_id=*/0, layer, x + b * H, e - b, H, S,
        absl::MakeConstSpan(expert_ids_).subspan(b * S, (e - b) * S),
        expert_ids_, absl::MakeConstSpan(r.weight).subspan(b * S, (e - b) * S),
        counts_, /*timeout_ms=*/0, bf16_result, options_.dispatch, &steps_[q]);
    steps_[q].set_placement_epoch(placement.epoch);
    steps_[q].set_direct(false);
  }
}

void RemoteStep::BuildDirectSteps(int64_t layer, const float* x, int64_t n,
                                  int64_t H, const Routing& r, int P,
                                  int64_t experts, uint64_t epoch) {
  const int64_t S = r.slots;
  PlanDirectStep(expert_ids_, n, S, P, experts, &direct_plan_);
  const DirectPlan& d = direct_plan_;
  steps_.resize(P);
  for (int q = 0; q < P; ++q) {
    const int64_t b = d.token_offsets[q], tokens = d.token_offsets[q + 1] - b;
    if (direct_rows_.size() < static_cast<size_t>(tokens * H)) {
      direct_rows_.resize(tokens * H);
    }
    for (int64_t i = 0; i < tokens; ++i) {
      std::memcpy(direct_rows_.data() + i * H, x + d.token[b + i] * H,
                  H * sizeof(float));
    }
    DirectRankSlots(d, q, P, experts, expert_ids_, r.weight, &direct_ids_,
                    &direct_weights_, &direct_counts_);
    // The outputs come back per slot and are summed here: the workers never
    // round a result (result_dtype F32), whatever the client asked for.
    EncodeStep(/*step_id=*/0, layer, direct_rows_.data(), tokens, H, S,
               direct_ids_, /*all_expert_ids=*/{}, direct_weights_,
               direct_counts_, /*timeout_ms=*/0, /*bf16_result=*/false,
               options_.dispatch, &steps_[q]);
    steps_[q].set_placement_epoch(epoch);
    steps_[q].set_direct(true);
  }
}

absl::Status RemoteStep::GatherResults(int64_t n, int64_t H, double wall_us,
                                       float* y, StageTimes* t) const {
  const int P = static_cast<int>(results_.size());
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    MOE_RETURN_IF_ERROR(DecodeStepResult(results_[q], q, e - b, H, y + b * H));
  }
  CriticalWorkerTimes(wall_us, t);
  return absl::OkStatus();
}

absl::Status RemoteStep::SumDirectResults(const MoeLayerConfig& c,
                                          const Routing& r, double wall_us,
                                          float* y, StageTimes* t) {
  const DirectPlan& d = direct_plan_;
  const int P = static_cast<int>(results_.size());
  const int64_t H = c.hidden;
  ElementType type = ElementType::kF32;
  bool typed = false;
  for (int q = 0; q < P; ++q) {
    const int64_t rows = d.row_offsets[q + 1] - d.row_offsets[q];
    if (d.token_offsets[q + 1] == d.token_offsets[q]) continue;  // not sent
    ElementType rank_type;
    MOE_RETURN_IF_ERROR(DecodeDirectResult(results_[q], q, rows, H, &rank_type,
                                           &direct_out_, d.row_offsets[q]));
    if (typed && rank_type != type) {
      return absl::InternalError(absl::StrCat(
          "worker rank ", q, " returned its expert outputs in another type"));
    }
    type = rank_type;
    typed = true;
  }
  CriticalWorkerTimes(wall_us, t);
  // The workers' weighted sum, here: the same kernel over the same rows in
  // slot order, so y has the bits of the all-to-all path. Timed by the
  // caller, as combine.
  const float* w = c.score_before_experts ? nullptr : r.weight.data();
  if (type == ElementType::kBF16) {
    kernels::cpu::CombineSlots(
        d.tokens, r.slots, H, w, d.slot_row.data(),
        reinterpret_cast<const uint16_t*>(direct_out_.data()), y,
        /*num_threads=*/1);
  } else {
    kernels::cpu::CombineSlots(
        d.tokens, r.slots, H, w, d.slot_row.data(),
        reinterpret_cast<const float*>(direct_out_.data()), y,
        /*num_threads=*/1);
  }
  return absl::OkStatus();
}

void RemoteStep::CriticalWorkerTimes(double wall_us, StageTimes* t) const {
  const int P = static_cast<int>(results_.size());
  double slowest = 0;
  int critical = 0;
  for (int q = 0; q < P; ++q) {
    const moe::v1::StepResult& res = results_[q];
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
}

absl::Status RemoteStep::Run(WorkerPool& pool, int64_t layer, const float* x,
                             int64_t n, const MoeLayerConfig& config,
                             const Routing& routing, bool bf16_result,
                             std::chrono::steady_clock::time_point deadline,
                             const SharedFn& shared, StageClock& clock,
                             float* y, StageTimes* t) {
  const int64_t hidden = config.hidden;
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
    BuildSteps(layer, x, n, hidden, config.num_experts, routing, *world_size,
               pool.placement(), bf16_result);
    t->plan_us += clock.Lap();
    status = pool.RunStep(steps_, deadline, overlap, &results_);
    if (!IsPlacementChanged(status)) break;
  }
  MOE_RETURN_IF_ERROR(status);
  MOE_RETURN_IF_ERROR(shared_y.status());
  const double wall_us = clock.Lap();
  MOE_RETURN_IF_ERROR(direct_ ? SumDirectResults(config, routing, wall_us, y, t)
                              : GatherResults(n, hidden, wall_us, y, t));
  if (*shared_y != nullptr) {
    const float* s = *shared_y;
    for (int64_t i = 0; i < n * hidden; ++i) y[i] += s[i];
  }
  // Worker stages are the slowest worker's own figures; putting the rows
  // together here (for a direct step, the weighted sum) counts as combine. The
  // total is this step's wall time.
  const double assemble_us = clock.Lap();
  t->combine_us += assemble_us;
  t->total_us = t->route_us + t->plan_us + wall_us + assemble_us;
  return absl::OkStatus();
}

}  // namespace moe

#include "server/step/remote_step.h"

#include <algorithm>

#include "absl/types/span.h"
#include "core/even_split.h"
#include "core/status_macros.h"
#include "engine/ep_plan.h"
#include "proto/step_views.h"

namespace moe {

void RemoteStep::BuildSteps(const Planned& p, int P,
                            const PlacementInForce& placement) {
  const Routing& r = *p.routing;
  // Rows of the experts' width: the latent width under LatentMoE.
  const int64_t n = p.n, H = p.config->expert_width(),
                E = p.config->num_experts;
  if (placement.epoch != replicas_epoch_) {
    replicas_.clear();
    replicas_epoch_ = placement.epoch;
  }
  const ReplicaMap* replicas = nullptr;
  if (placement.placement != nullptr) {
    auto it = replicas_.find(p.layer);
    if (it == replicas_.end()) {
      it = replicas_
               .emplace(
                   p.layer,
                   MakeReplicaMap(placement.placement->layers.at(p.layer), E))
               .first;
    }
    replicas = &it->second;
  }
  PlanDispatch(r, n, P, E, &expert_ids_, &counts_, replicas);
  const int64_t physical = replicas != nullptr ? replicas->physical : E;
  worker_rows_ = RowsPerRank(counts_, P, physical);
  direct_ = P >= 2 && n <= options_.direct_step_tokens;
  StepContent c;
  c.in.layer = p.layer;
  c.in.slots = r.slots;
  // The step channel sets the step id and timeout (EncodedStep::Address), so
  // they are left unset here.
  c.in.timeout = std::chrono::milliseconds(0);
  c.in.dispatch = options_.dispatch;
  c.hidden = H;
  c.placement_epoch = placement.epoch;
  if (direct_) {
    direct_step_.Build(c, {p.x, n, expert_ids_, r.weight, P, physical},
                       &steps_);
    return;
  }
  const int64_t S = r.slots;
  c.in.all_expert_ids = expert_ids_;
  c.in.counts = counts_;
  c.bf16_result = p.bf16_result;
  steps_.resize(P);
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    c.in.tokens = e - b;
    c.in.rows = p.x + b * H;
    c.in.expert_ids =
        absl::MakeConstSpan(expert_ids_).subspan(b * S, (e - b) * S);
    c.in.weights = absl::MakeConstSpan(r.weight).subspan(b * S, (e - b) * S);
    steps_[q] = c;
  }
}

absl::Status RemoteStep::GatherResults(int64_t n, int64_t H, float* y) const {
  const int P = static_cast<int>(results_.size());
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    MOE_RETURN_IF_ERROR(DecodeStepResult(results_[q], q, e - b, H, y + b * H));
  }
  return absl::OkStatus();
}

void RemoteStep::CriticalWorkerTimes(double wall_us, StageTimes* t) const {
  const int P = static_cast<int>(results_.size());
  double slowest = 0;
  WorkerStageTimes c;
  for (int q = 0; q < P; ++q) {
    WorkerStageTimes w = results_[q].times;
    w.rank = q;
    if (q == 0 || w.experts_us > c.experts_us) c = w;
    slowest = std::max(slowest, w.step_us);
  }
  // The stages of the worker whose experts took longest: the step's
  // critical path. Another worker's combine wait also holds the time it
  // waited for that worker's experts (uneven expert load), which is not
  // exchange overhead and is already in experts.
  if (P > 0) {
    t->dispatch_us = c.gather_us + c.dispatch_wait_us;
    t->experts_us = c.experts_us;
    t->combine_us = c.combine_wait_us + c.sum_us;
    t->critical_worker = c;
  }
  // What neither the workers' own clocks nor the shared expert running
  // here meanwhile cover: the messages' trips (hidden when the shared
  // expert takes longer).
  t->wire_us = std::max(0.0, wall_us - std::max(slowest, t->shared_us));
}

absl::Status RemoteStep::Run(StepGroup& group, const StepRequest& request,
                             const MoeLayerConfig& config,
                             const SharedFn& shared, StageClock& clock,
                             StepOutput* out) {
  const int64_t layer = request.layer;
  const float* x = request.x;
  const int64_t n = request.n;
  const Routing& routing = out->routing;
  // A layer with shared experts or an expert frame finishes y here, in
  // fp32: the workers' outputs then come home in fp32 too.
  // So does one with zero experts, an output scale or an output bias.
  const bool bf16_result = request.bf16_out && !config.has_shared() &&
                           !config.has_expert_frame() &&
                           !HasOutputTerms(config);
  std::chrono::steady_clock::time_point deadline = request.deadline;
  float* y = out->y.data();
  StageTimes* t = &out->times;
  // Rows of the experts' width: the latent width under LatentMoE.
  const int64_t hidden = config.expert_width();
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
        group.AwaitGroup(std::chrono::steady_clock::time_point::max());
    deadline += std::chrono::microseconds(static_cast<int64_t>(clock.Lap()));
    MOE_RETURN_IF_ERROR(world_size.status());
    BuildSteps({layer, x, n, &config, &routing, bf16_result}, *world_size,
               group.placement());
    t->plan_us += clock.Lap();
    status = group.RunStep(steps_, deadline, overlap, &results_);
    if (!IsPlacementChanged(status)) break;
  }
  MOE_RETURN_IF_ERROR(status);
  MOE_RETURN_IF_ERROR(shared_y.status());
  const double wall_us = clock.Lap();
  // A direct step's slot outputs are summed here, in the engine: timed as
  // combine (below).
  const float* weights =
      config.score_before_experts ? nullptr : routing.weight.data();
  MOE_RETURN_IF_ERROR(direct_ ? direct_step_.Sum(results_, hidden, weights, y)
                              : GatherResults(n, hidden, y));
  CriticalWorkerTimes(wall_us, t);
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

#include "server/remote_step.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

void BuildSteps(int64_t layer, const float* x, int64_t n, int64_t H, int64_t E,
                const Routing& r, int P, std::vector<moe::v1::Step>* steps) {
  const int64_t S = r.slots;
  std::vector<int64_t> counts(P * E, 0);
  steps->assign(P, moe::v1::Step());
  for (int q = 0; q < P; ++q) {
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    moe::v1::Step& step = (*steps)[q];
    step.set_layer(static_cast<int32_t>(layer));
    step.set_slots(static_cast<int32_t>(S));
    auto* rows = step.mutable_rows();
    rows->set_dtype(moe::v1::F32);
    rows->add_shape(e - b);
    rows->add_shape(H);
    rows->set_data(reinterpret_cast<const char*>(x + b * H),
                   static_cast<size_t>((e - b) * H) * sizeof(float));
    step.mutable_expert_ids()->Reserve((e - b) * S);
    step.mutable_weights()->Reserve((e - b) * S);
    for (int64_t i = b * S; i < e * S; ++i) {
      const bool go = r.dispatched[i] != 0;
      step.add_expert_ids(go ? r.expert[i] : -1);
      step.add_weights(r.weight[i]);
      if (go) ++counts[q * E + r.expert[i]];
    }
  }
  for (auto& step : *steps)
    step.mutable_counts()->Assign(counts.begin(), counts.end());
}

absl::Status GatherResults(const std::vector<moe::v1::StepResult>& results,
                           int64_t n, int64_t H, float* y, StageTimes* t) {
  const int P = static_cast<int>(results.size());
  for (int q = 0; q < P; ++q) {
    const moe::v1::StepResult& res = results[q];
    const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
    const auto& rows = res.rows();
    if (rows.dtype() != moe::v1::F32 || rows.shape_size() != 2 ||
        rows.shape(0) != e - b || rows.shape(1) != H ||
        rows.data().size() != static_cast<size_t>((e - b) * H) * 4) {
      return absl::InternalError(
          absl::StrCat("worker rank ", q, " returned a malformed result"));
    }
    std::memcpy(y + b * H, rows.data().data(), rows.data().size());
    t->dispatch_us = std::max(t->dispatch_us, res.dispatch_us());
    t->experts_us = std::max(t->experts_us, res.experts_us());
    t->combine_us = std::max(t->combine_us, res.combine_us());
  }
  return absl::OkStatus();
}

absl::Status RemoteStep::Run(WorkerPool& pool, int64_t layer, const float* x,
                             int64_t n, int64_t hidden, int64_t num_experts,
                             const Routing& routing,
                             std::chrono::steady_clock::time_point deadline,
                             const SharedFn& shared, StageClock& clock,
                             float* y, StageTimes* t) {
  BuildSteps(layer, x, n, hidden, num_experts, routing, pool.state().world_size,
             &steps_);
  t->plan_us = clock.Lap();
  absl::StatusOr<const float*> shared_y = nullptr;
  auto overlap = [&] {
    StageClock shared_clock;
    shared_y = shared();
    t->shared_us = shared_clock.Lap();
  };
  MOE_RETURN_IF_ERROR(pool.RunStep(steps_, deadline, overlap, &results_));
  MOE_RETURN_IF_ERROR(shared_y.status());
  const double wall_us = clock.Lap();
  MOE_RETURN_IF_ERROR(GatherResults(results_, n, hidden, y, t));
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

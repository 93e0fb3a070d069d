#include "server/step_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {

StepRunner::StepRunner(const RouterModel& model, WorkerPool* pool, int threads)
    : model_(model), pool_(pool), threads_(threads), local_(threads) {}

absl::Status StepRunner::Run(int64_t layer, const float* x, int64_t n,
                             absl::Span<const int64_t> segment_ends,
                             std::chrono::steady_clock::time_point deadline,
                             Output* out) {
  const LayerWeights* w = model_.layer(layer);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " is not an MoE layer"));
  }
  out->y.resize(n * w->config.hidden);
  out->times = StageTimes();
  if (pool_ == nullptr) {
    return local_.Forward(*w, x, n, segment_ends, out->y.data(), &out->routing,
                          &out->times);
  }
  return RunRemote(*w, x, n, segment_ends, deadline, out);
}

absl::Status StepRunner::RunRemote(
    const LayerWeights& w, const float* x, int64_t n,
    absl::Span<const int64_t> segment_ends,
    std::chrono::steady_clock::time_point deadline, Output* out) {
  const MoeLayerConfig& c = w.config;
  const int64_t H = c.hidden, E = c.num_experts;
  StageTimes& t = out->times;
  StageClock clock;
  if (absl::Status s =
          router_.Route(w, x, n, segment_ends, threads_, &out->routing);
      !s.ok()) {
    return s;
  }
  const Routing& r = out->routing;
  t.route_us = clock.Lap();

  // Plan: contiguous row shards, and every shard's dispatched slots per
  // expert, which fixes every worker's send and receive sizes.
  const int P = pool_->state().world_size;
  const int64_t S = r.slots;
  std::vector<int64_t> counts(P * E, 0);
  steps_.assign(P, moe::v1::Step());
  for (int q = 0; q < P; ++q) {
    const int64_t b = q * n / P, e = (q + 1) * n / P;
    moe::v1::Step& step = steps_[q];
    step.set_layer(static_cast<int32_t>(w.layer));
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
  for (auto& step : steps_) {
    step.mutable_counts()->Assign(counts.begin(), counts.end());
  }
  t.plan_us = clock.Lap();

  // The shared expert runs here while the workers compute.
  const bool shared = w.has_shared && n > 0;
  absl::Status shared_status;
  auto overlap = [&] {
    StageClock shared_clock;
    if (shared) {
      shared_out_.resize(n * H);
      shared_status = shared_.RunShared(w, x, n, shared_out_.data(), threads_);
    }
    t.shared_us = shared_clock.Lap();
  };
  if (absl::Status s = pool_->RunStep(steps_, deadline, overlap, &results_);
      !s.ok()) {
    return s;
  }
  if (!shared_status.ok()) return shared_status;
  const double wall_us = clock.Lap();

  for (int q = 0; q < P; ++q) {
    const moe::v1::StepResult& res = results_[q];
    const int64_t b = q * n / P, e = (q + 1) * n / P;
    const auto& rows = res.rows();
    if (rows.dtype() != moe::v1::F32 || rows.shape_size() != 2 ||
        rows.shape(0) != e - b || rows.shape(1) != H ||
        rows.data().size() != static_cast<size_t>((e - b) * H) * 4) {
      return absl::InternalError(
          absl::StrCat("worker rank ", q, " returned a malformed result"));
    }
    std::memcpy(out->y.data() + b * H, rows.data().data(), rows.data().size());
    t.dispatch_us = std::max(t.dispatch_us, res.dispatch_us());
    t.experts_us = std::max(t.experts_us, res.experts_us());
    t.combine_us = std::max(t.combine_us, res.combine_us());
  }
  if (shared) {
    for (int64_t i = 0; i < n * H; ++i) out->y[i] += shared_out_[i];
  }
  // Worker stages are the slowest worker's own figures; putting the rows
  // together here counts as combine. The total is this step's wall time.
  const double assemble_us = clock.Lap();
  t.combine_us += assemble_us;
  t.total_us = t.route_us + t.plan_us + wall_us + assemble_us;
  return absl::OkStatus();
}

}  // namespace moe

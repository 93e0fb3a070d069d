#include "engine/local_moe.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dispatch.h"

namespace moe {
namespace {
namespace kc = kernels::cpu;
}  // namespace

absl::Status LocalMoe::Forward(const LayerWeights& w, const float* x, int64_t n,
                               absl::Span<const int64_t> segment_ends, float* y,
                               Routing* routing, StageTimes* times) {
  const MoeLayerConfig& c = w.config;
  const int64_t H = c.hidden, E = c.num_experts;
  if (w.expert_begin != 0 || w.expert_end != E) {
    return absl::FailedPreconditionError(absl::StrCat(
        "single-process layer ", w.layer, " needs all ", E,
        " experts loaded, has [", w.expert_begin, ", ", w.expert_end, ")"));
  }
  if (c.has_shared() && !w.has_shared) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " was loaded without its shared expert"));
  }
  StageTimes local;
  StageTimes& t = times != nullptr ? *times : local;
  StageClock clock;

  if (absl::Status s = router_.Route(w, x, n, segment_ends, threads_, routing);
      !s.ok()) {
    return s;
  }
  t.route_us = clock.Lap();

  // Plan: dispatched slots sorted by expert; row j of the expert pass is
  // slot order_[j].
  const int64_t slots = routing->slots, num_slots = n * slots;
  slot_expert_.resize(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) {
    slot_expert_[i] = routing->dispatched[i] ? routing->expert[i] : -1;
  }
  offsets_.resize(E + 1);
  order_.resize(num_slots);
  const int64_t rows = kc::SortSlotsByExpert(slot_expert_.data(), num_slots, E,
                                             offsets_.data(), order_.data());
  slot_row_.assign(num_slots, -1);
  src_row_.resize(rows);
  for (int64_t j = 0; j < rows; ++j) {
    slot_row_[order_[j]] = j;
    src_row_[j] = order_[j] / slots;
  }
  t.plan_us = clock.Lap();

  // Permute: inputs by pointer, or scaled copies when the routing weight
  // multiplies the expert input.
  in_rows_.resize(rows);
  out_rows_.resize(rows);
  expert_out_.resize(rows * H);
  if (c.score_before_experts) {
    scale_.resize(rows);
    for (int64_t j = 0; j < rows; ++j) scale_[j] = routing->weight[order_[j]];
    scaled_in_.resize(rows * H);
    kc::GatherRows(x, H, src_row_.data(), scale_.data(), rows,
                   scaled_in_.data(), threads_);
  }
  for (int64_t j = 0; j < rows; ++j) {
    in_rows_[j] = c.score_before_experts ? scaled_in_.data() + j * H
                                         : x + src_row_[j] * H;
    out_rows_[j] = expert_out_.data() + j * H;
  }
  t.dispatch_us = clock.Lap();

  if (absl::Status s = runner_.RunRouted(w, offsets_, in_rows_.data(),
                                         out_rows_.data(), threads_);
      !s.ok()) {
    return s;
  }
  t.experts_us = clock.Lap();

  kc::CombineSlots(n, slots, H,
                   c.score_before_experts ? nullptr : routing->weight.data(),
                   slot_row_.data(), expert_out_.data(), y, threads_);
  t.combine_us = clock.Lap();

  if (w.has_shared && n > 0) {
    shared_out_.resize(n * H);
    if (absl::Status s =
            runner_.RunShared(w, x, n, shared_out_.data(), threads_);
        !s.ok()) {
      return s;
    }
    for (int64_t i = 0; i < n * H; ++i) y[i] += shared_out_[i];
  }
  t.shared_us = clock.Lap();
  t.total_us = t.route_us + t.plan_us + t.dispatch_us + t.experts_us +
               t.combine_us + t.shared_us;
  return absl::OkStatus();
}

}  // namespace moe

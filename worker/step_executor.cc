#include "worker/step_executor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/stage_times.h"
#include "kernels/cpu/dispatch.h"

namespace moe {
namespace {
namespace kc = kernels::cpu;
}  // namespace

absl::Status StepExecutor::Load(const ModelSource& source, int64_t begin,
                                int64_t end, WeightDType dtype,
                                int64_t max_batch_tokens) {
  layers_.clear();
  config_ = source.info().layer;
  max_batch_tokens_ = max_batch_tokens;
  LoadOptions opts;
  opts.dtype = dtype;
  opts.load_gate = false;
  opts.load_shared = false;
  opts.expert_begin = begin;
  opts.expert_end = end;
  opts.num_threads = threads_;
  for (int64_t layer : source.info().moe_layers) {
    MOE_ASSIGN_OR_RETURN(layers_[layer], LoadLayerWeights(source, layer, opts));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::CheckPlan(const moe::v1::Step& step, int world,
                                     int64_t rows) const {
  const int64_t E = config_.num_experts, S = step.slots();
  if (S < 0 || step.expert_ids_size() != rows * S ||
      step.weights_size() != rows * S) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step_id(), ": ", rows, " rows with ", S,
                     " slots need that many expert ids and weights, got ",
                     step.expert_ids_size(), " and ", step.weights_size()));
  }
  if (step.counts_size() != world * E) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step_id(), ": counts has ",
                     step.counts_size(), " entries, expected ", world * E));
  }
  // Bounds what the counts may make this worker allocate: no expert gets
  // more than every token of a full batch from one source.
  for (int64_t c : step.counts()) {
    if (c < 0 || c > max_batch_tokens_) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id(), ": count ", c, " outside [0, ",
                       max_batch_tokens_, "]"));
    }
  }
  for (int32_t e : step.expert_ids()) {
    if (e < -1 || e >= E) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id(),
                                                     ": expert id ", e,
                                                     " outside [-1, ", E, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Run(const moe::v1::Step& step, Communicator& comm,
                               moe::v1::StepResult* result) {
  const int rank = comm.rank(), world = comm.size();
  auto it = layers_.find(step.layer());
  if (it == layers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker has no weights for layer ", step.layer()));
  }
  const LayerWeights& w = *it->second;
  const int64_t E = config_.num_experts, H = config_.hidden, S = step.slots();
  const auto& rows = step.rows();
  if (rows.dtype() != moe::v1::F32 || rows.shape_size() != 2 ||
      rows.shape(1) != H || rows.shape(0) < 0 ||
      rows.data().size() != static_cast<size_t>(rows.shape(0) * H) * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step.step_id(), ": rows must be F32 [N, ", H, "]"));
  }
  const int64_t n = rows.shape(0);
  MOE_RETURN_IF_ERROR(CheckPlan(step, world, n));
  StageClock clock;

  // Permute: own dispatched slots in expert order, which is also
  // destination-rank order since ranks own contiguous expert ranges.
  x_.resize(n * H);
  std::memcpy(x_.data(), rows.data().data(), x_.size() * sizeof(float));
  const int64_t num_slots = n * S;
  offsets_.resize(E + 1);
  order_.resize(num_slots);
  const int64_t sent = kc::SortSlotsByExpert(
      step.expert_ids().data(), num_slots, E, offsets_.data(), order_.data());
  const int64_t* counts = step.counts().data();
  for (int64_t e = 0; e < E; ++e) {
    if (offsets_[e + 1] - offsets_[e] != counts[rank * E + e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id(), ": plan says rank ", rank,
                       " sends ", counts[rank * E + e], " rows to expert ", e,
                       ", its slots hold ", offsets_[e + 1] - offsets_[e]));
    }
  }
  src_row_.resize(sent);
  for (int64_t j = 0; j < sent; ++j)
    src_row_[j] = order_[j] / std::max<int64_t>(S, 1);
  const bool scale_input = config_.score_before_experts;
  if (scale_input) {
    scale_.resize(sent);
    for (int64_t j = 0; j < sent; ++j) scale_[j] = step.weights(order_[j]);
  }
  send_.resize(sent * H);
  kc::GatherRows(x_.data(), H, src_row_.data(),
                 scale_input ? scale_.data() : nullptr, sent, send_.data(),
                 threads_);

  // Sizes straight from the plan: rows to each destination's experts, and
  // rows for this rank's experts from each source.
  const int64_t my_begin = ExpertBegin(rank, world, E);
  const int64_t my_end = ExpertBegin(rank + 1, world, E);
  send_counts_.assign(world, 0);
  recv_counts_.assign(world, 0);
  for (int q = 0; q < world; ++q) {
    for (int64_t e = ExpertBegin(q, world, E); e < ExpertBegin(q + 1, world, E);
         ++e) {
      send_counts_[q] += counts[rank * E + e] * H;
    }
    for (int64_t e = my_begin; e < my_end; ++e) {
      recv_counts_[q] += counts[q * E + e] * H;
    }
  }
  int64_t received = 0;
  for (int64_t c : recv_counts_) received += c / H;
  recv_.resize(received * H);
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(step.timeout_ms(), 1));
  MOE_RETURN_IF_ERROR(comm.AllToAllV(send_.data(), send_counts_, recv_.data(),
                                     recv_counts_, timeout));
  result->set_dispatch_us(clock.Lap());

  // Received rows are ordered (source, expert); group them by expert with
  // pointers, no copy. Outputs land at the same positions, ready to go back.
  const int64_t local = my_end - my_begin;
  out_.resize(received * H);
  in_rows_.resize(received);
  out_rows_.resize(received);
  group_offsets_.assign(local + 1, 0);
  cursor_.resize(world);  // next received row of each source
  int64_t base = 0;
  for (int q = 0; q < world; ++q) {
    cursor_[q] = base;
    base += recv_counts_[q] / H;
  }
  int64_t next = 0;
  for (int64_t g = 0; g < local; ++g) {
    for (int q = 0; q < world; ++q) {
      for (int64_t i = 0; i < counts[q * E + my_begin + g]; ++i, ++next) {
        in_rows_[next] = recv_.data() + cursor_[q] * H;
        out_rows_[next] = out_.data() + cursor_[q] * H;
        ++cursor_[q];
      }
    }
    group_offsets_[g + 1] = next;
  }
  MOE_RETURN_IF_ERROR(runner_.RunRouted(w, group_offsets_, in_rows_.data(),
                                        out_rows_.data(), threads_));
  result->set_experts_us(clock.Lap());
  result->set_expert_rows(received);

  back_.resize(sent * H);
  MOE_RETURN_IF_ERROR(comm.AllToAllV(out_.data(), recv_counts_, back_.data(),
                                     send_counts_, timeout));
  slot_row_.assign(num_slots, -1);
  for (int64_t j = 0; j < sent; ++j) slot_row_[order_[j]] = j;
  y_.resize(n * H);
  kc::CombineSlots(n, S, H, scale_input ? nullptr : step.weights().data(),
                   slot_row_.data(), back_.data(), y_.data(), threads_);
  auto* out = result->mutable_rows();
  out->set_dtype(moe::v1::F32);
  out->add_shape(n);
  out->add_shape(H);
  out->set_data(reinterpret_cast<const char*>(y_.data()),
                y_.size() * sizeof(float));
  result->set_combine_us(clock.Lap());
  return absl::OkStatus();
}

}  // namespace moe

#include "worker/cpu_step_executor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/stage_times.h"
#include "kernels/cpu/dispatch.h"
#include "worker/comm/gloo_communicator.h"

namespace moe {
namespace {
namespace kc = kernels::cpu;
}  // namespace

absl::Status CpuStepExecutor::Load(const ModelSource& source, int64_t begin,
                                   int64_t end, WeightDType dtype,
                                   int64_t max_batch_tokens) {
  layers_.clear();
  config_ = source.info().layer;
  max_batch_tokens_ = max_batch_tokens;
  LoadOptions opts = WorkerLoadOptions(begin, end);
  opts.dtype = dtype;
  opts.num_threads = threads_;
  for (int64_t layer : source.info().moe_layers) {
    MOE_ASSIGN_OR_RETURN(layers_[layer], LoadLayerWeights(source, layer, opts));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> CpuStepExecutor::Connect(
    int rank, int world, const std::string& host,
    gloo::rendezvous::Store& store, std::chrono::milliseconds timeout) {
  return CreateGlooCommunicator(rank, world, host, store, timeout);
}

absl::Status CpuStepExecutor::Run(const moe::v1::Step& step, Communicator& comm,
                                  moe::v1::StepResult* result) {
  auto it = layers_.find(step.layer());
  if (it == layers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker has no weights for layer ", step.layer()));
  }
  const LayerWeights& w = *it->second;
  const int64_t E = config_.num_experts, H = config_.hidden;
  MOE_RETURN_IF_ERROR(PlanStep(step, comm.rank(), comm.size(), E, H,
                               max_batch_tokens_, &plan_));
  const StepPlan& p = plan_;
  StageClock clock;

  // Permute own rows by destination expert (scaled when the routing weight
  // multiplies the expert input).
  x_.resize(p.tokens * H);
  std::memcpy(x_.data(), step.rows().data().data(), x_.size() * sizeof(float));
  src_row_.resize(p.sent);
  for (int64_t j = 0; j < p.sent; ++j) {
    src_row_[j] = p.order[j] / std::max<int64_t>(p.slots, 1);
  }
  const bool scale_input = config_.score_before_experts;
  if (scale_input) {
    scale_.resize(p.sent);
    for (int64_t j = 0; j < p.sent; ++j) scale_[j] = step.weights(p.order[j]);
  }
  send_.resize(p.sent * H);
  kc::GatherRows(x_.data(), H, src_row_.data(),
                 scale_input ? scale_.data() : nullptr, p.sent, send_.data(),
                 threads_);
  send_counts_.resize(p.send_rows.size());
  recv_counts_.resize(p.recv_rows.size());
  for (size_t q = 0; q < p.send_rows.size(); ++q) {
    send_counts_[q] = p.send_rows[q] * H;
    recv_counts_[q] = p.recv_rows[q] * H;
  }
  recv_.resize(p.received * H);
  const auto timeout = StepTimeout(step);
  MOE_RETURN_IF_ERROR(comm.AllToAllV(send_.data(), send_counts_, recv_.data(),
                                     recv_counts_, ElementType::kF32, timeout));
  result->set_dispatch_us(clock.Lap());

  // Grouped by expert through pointers; outputs land where they came from,
  // ready to go back.
  out_.resize(p.received * H);
  in_rows_.resize(p.received);
  out_rows_.resize(p.received);
  for (int64_t i = 0; i < p.received; ++i) {
    in_rows_[i] = recv_.data() + p.grouped[i] * H;
    out_rows_[i] = out_.data() + p.grouped[i] * H;
  }
  MOE_RETURN_IF_ERROR(runner_.RunRouted(w, p.expert_offsets, in_rows_.data(),
                                        out_rows_.data(), threads_));
  result->set_experts_us(clock.Lap());
  result->set_expert_rows(p.received);

  back_.resize(p.sent * H);
  MOE_RETURN_IF_ERROR(comm.AllToAllV(out_.data(), recv_counts_, back_.data(),
                                     send_counts_, ElementType::kF32, timeout));
  y_.resize(p.tokens * H);
  kc::CombineSlots(p.tokens, p.slots, H,
                   scale_input ? nullptr : step.weights().data(),
                   p.slot_row.data(), back_.data(), y_.data(), threads_);
  auto* out = result->mutable_rows();
  out->set_dtype(moe::v1::F32);
  out->add_shape(p.tokens);
  out->add_shape(H);
  out->set_data(reinterpret_cast<const char*>(y_.data()),
                y_.size() * sizeof(float));
  result->set_combine_us(clock.Lap());
  return absl::OkStatus();
}

}  // namespace moe

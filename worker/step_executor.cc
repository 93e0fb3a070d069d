#include "worker/step_executor.h"

#include "absl/strings/str_cat.h"
#include "comm/gloo_communicator.h"
#include "core/status_macros.h"
#include "core/thread_slice.h"
#include "proto/step_codec.h"
#ifdef MOE_HAVE_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace moe {

LoadOptions WorkerLoadOptions(const ExpertShard& shard) {
  LoadOptions opts;
  opts.load_gate = false;
  opts.load_shared = false;
  opts.expert_begin = shard.begin;
  opts.expert_end = shard.end;
  opts.layer_experts = shard.layer_slots;
  return opts;
}

absl::StatusOr<std::unique_ptr<StepExecutor>> StepExecutor::Create(
    const std::string& device, int threads, Collective collective) {
  MOE_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(device));
  const bool shares_device = collective == Collective::kGloo;
  if (collective == Collective::kAuto) {
    collective = spec.cuda ? Collective::kNccl : Collective::kGloo;
  }
  if (collective == Collective::kNccl && !spec.cuda) {
    return absl::InvalidArgumentError(
        "--collective nccl needs a CUDA device (--device cuda[:N])");
  }
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       CreateExpertBackend(device, threads));
  return std::unique_ptr<StepExecutor>(new StepExecutor(
      std::move(backend), spec, collective, shares_device, device, threads));
}

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(
    const std::string& device, int threads, Collective collective) {
  return StepExecutor::Create(device, threads, collective);
}

namespace {

absl::Status CheckShard(const ModelSource& source, const ExpertShard& shard) {
  if (shard.redundant < 0 ||
      (shard.redundant > 0 && shard.layer_slots.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment: redundant_experts ", shard.redundant,
                     " needs layer_slots for every MoE layer"));
  }
  for (int64_t layer : source.info().moe_layers) {
    if (!shard.layer_slots.empty() && shard.layer_slots.count(layer) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment: layer_slots has no entry for MoE layer ", layer));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StepExecutor::Load(const ModelSource& source,
                                const ExpertShard& shard, WeightDType dtype,
                                int64_t max_batch_tokens,
                                uint64_t placement_epoch) {
  MOE_RETURN_IF_ERROR(CheckShard(source, shard));
  {
    std::lock_guard<std::mutex> lock(staged_mu_);
    staged_.reset();
  }
  LoadOptions opts = WorkerLoadOptions(shard);
  opts.dtype = dtype;
  MOE_RETURN_IF_ERROR(backend_->Load(source, opts, max_batch_tokens));
  max_tokens_ = max_batch_tokens;
  staged_max_tokens_ = max_batch_tokens;
  physical_experts_ = source.info().layer.num_experts + shard.redundant;
  epoch_ = placement_epoch;
  y_.resize(max_batch_tokens * source.info().layer.hidden);
  return absl::OkStatus();
}

absl::Status StepExecutor::Stage(const ModelSource& source,
                                 const ExpertShard& shard, WeightDType dtype,
                                 uint64_t epoch) {
  MOE_RETURN_IF_ERROR(CheckShard(source, shard));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       CreateExpertBackend(device_, threads_));
  LoadOptions opts = WorkerLoadOptions(shard);
  opts.dtype = dtype;
  MOE_RETURN_IF_ERROR(backend->Load(source, opts, staged_max_tokens_));
  std::lock_guard<std::mutex> lock(staged_mu_);
  staged_ = std::move(backend);
  staged_epoch_ = epoch;
  staged_physical_ = source.info().layer.num_experts + shard.redundant;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> StepExecutor::Connect(
    int rank, int world, const std::string& host,
    gloo::rendezvous::Store& store, std::chrono::milliseconds timeout) {
  // The transport threads the communicator starts (Gloo's event loop,
  // NCCL's proxy) inherit this thread's slice: they only move data, and each
  // step waits on them (core/thread_slice.h).
  const ScopedThreadRole transport(ThreadRole::kLatency, ThreadRole::kCompute);
  if (collective_ == Collective::kGloo) {
    return CreateGlooCommunicator(rank, world, host, store, timeout);
  }
#ifdef MOE_HAVE_CUDA
  return CreateNcclCommunicator(rank, world, store, spec_.ordinal, timeout);
#else
  return absl::UnimplementedError("this build has no NCCL");
#endif
}

absl::Status StepExecutor::Run(const moe::v1::Step& step, Communicator& comm,
                               moe::v1::StepResult* result) {
  // Every refusal before step_.Run leaves the communicator untouched.
  collectives_intact_ = true;
  if (step.placement_epoch() != epoch_) {
    std::lock_guard<std::mutex> lock(staged_mu_);
    if (staged_ == nullptr || staged_epoch_ != step.placement_epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step.step_id(), " is planned for expert placement ",
          step.placement_epoch(), ", this worker holds ", epoch_,
          staged_ ? absl::StrCat(" and has staged ", staged_epoch_) : ""));
    }
    backend_ = std::move(staged_);
    physical_experts_ = staged_physical_;
    epoch_ = staged_epoch_;
  }
  if (!backend_->HasLayer(step.layer())) {
    return absl::NotFoundError(
        absl::StrCat("worker has no weights for layer ", step.layer()));
  }
  const auto received = std::chrono::steady_clock::now();
  const int64_t H = backend_->config().hidden;
  const moe::v1::DType result_dtype = step.result_dtype();
  if (result_dtype != moe::v1::DTYPE_UNSPECIFIED &&
      result_dtype != moe::v1::F32 && result_dtype != moe::v1::BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step.step_id(), ": result_dtype must be F32 or BF16, got ",
        static_cast<int>(result_dtype)));
  }
  EpStepInput in;
  MOE_RETURN_IF_ERROR(DecodeStep(step, H, &scratch_, &in));
  in.experts = physical_experts_;
  const auto decoded = std::chrono::steady_clock::now();
  if (in.tokens > max_tokens_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("step ", step.step_id(), ": ", in.tokens,
                     " rows exceed this worker's ", max_tokens_));
  }
  EpStepTimes times;
  if (step.direct()) {
    // No collective: the group stays intact whatever happens here.
    DirectOutputs outputs;
    MOE_RETURN_IF_ERROR(step_.RunDirect(in, *backend_, comm.rank(), comm.size(),
                                        max_tokens_, &outputs, &times));
    EncodeDirectResult(outputs, in.tokens, in.slots, H, times, result);
  } else {
    absl::Status s = step_.Run(in, *backend_, comm, max_tokens_,
                               /*x_resident=*/false, y_.data(), &times);
    collectives_intact_ = step_.collectives_intact();
    MOE_RETURN_IF_ERROR(s);
    EncodeStepResult(y_.data(), in.tokens, H, times, result_dtype, result);
  }
  using Us = std::chrono::duration<double, std::micro>;
  result->set_decode_us(Us(decoded - received).count());
  result->set_step_us(Us(std::chrono::steady_clock::now() - received).count());
  return absl::OkStatus();
}

}  // namespace moe

#include "worker/step_executor.h"

#include "absl/strings/str_cat.h"
#include "comm/gloo_communicator.h"
#include "core/status_macros.h"
#include "core/thread_slice.h"
#ifdef MOE_HAVE_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace moe {

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

absl::Status StepExecutor::Load(const ModelSource& source,
                                const ExpertShard& shard, WeightDType dtype,
                                int64_t max_batch_tokens,
                                uint64_t placement_epoch) {
  MOE_RETURN_IF_ERROR(CheckShard(source.info(), shard));
  {
    absl::MutexLock lock(&staged_mu_);
    staged_.reset();
  }
  LoadOptions opts = WorkerLoadOptions(shard);
  opts.dtype = dtype;
  MOE_RETURN_IF_ERROR(backend_->Load(source, opts, max_batch_tokens));
  max_tokens_ = max_batch_tokens;
  staged_max_tokens_ = max_batch_tokens;
  physical_experts_ = source.info().layer.num_experts + shard.redundant;
  epoch_ = placement_epoch;
  y_.resize(max_batch_tokens * source.info().layer.expert_width());
  return absl::OkStatus();
}

absl::Status StepExecutor::Stage(const ModelSource& source,
                                 const ExpertShard& shard, WeightDType dtype,
                                 uint64_t epoch) {
  MOE_RETURN_IF_ERROR(CheckShard(source.info(), shard));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       CreateExpertBackend(device_, threads_));
  LoadOptions opts = WorkerLoadOptions(shard);
  opts.dtype = dtype;
  MOE_RETURN_IF_ERROR(backend->Load(source, opts, staged_max_tokens_));
  absl::MutexLock lock(&staged_mu_);
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

absl::Status StepExecutor::Run(const StepHeader& header, StepDecoder decode,
                               Communicator& comm, StepOutput* out) {
  // Every refusal before step_.Run leaves the communicator untouched.
  collectives_intact_ = true;
  const auto received = std::chrono::steady_clock::now();
  if (header.placement_epoch != epoch_) {
    absl::MutexLock lock(&staged_mu_);
    if (staged_ == nullptr || staged_epoch_ != header.placement_epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", header.step_id, " is planned for expert placement ",
          header.placement_epoch, ", this worker holds ", epoch_,
          staged_ ? absl::StrCat(" and has staged ", staged_epoch_) : ""));
    }
    backend_ = std::move(staged_);
    physical_experts_ = staged_physical_;
    epoch_ = staged_epoch_;
  }
  if (!backend_->HasLayer(header.layer)) {
    return absl::NotFoundError(
        absl::StrCat("worker has no weights for layer ", header.layer));
  }
  const int64_t H = backend_->config().expert_width();
  EpStepInput in;
  MOE_RETURN_IF_ERROR(decode(H, &scratch_, &in));
  in.experts = physical_experts_;
  using Us = std::chrono::duration<double, std::micro>;
  out->decode_us = Us(std::chrono::steady_clock::now() - received).count();
  if (in.tokens > max_tokens_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("step ", header.step_id, ": ", in.tokens,
                     " rows exceed this worker's ", max_tokens_));
  }
  out->tokens = in.tokens;
  out->slots = in.slots;
  out->hidden = H;
  out->times = EpStepTimes();
  if (header.direct) {
    // No collective: the group stays intact whatever happens here.
    out->y = nullptr;
    return step_.RunDirect(in, *backend_, {comm.rank(), comm.size()},
                           max_tokens_, &out->direct, &out->times);
  }
  absl::Status s = step_.Run(in, *backend_, comm,
                             {.max_count = max_tokens_, .x_resident = false},
                             y_.data(), &out->times);
  collectives_intact_ = step_.collectives_intact();
  out->y = y_.data();
  return s;
}

}  // namespace moe

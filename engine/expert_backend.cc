#include "engine/expert_backend.h"

#include "absl/strings/str_cat.h"
#include "core/device_spec.h"
#include "core/status_macros.h"
#include "engine/cpu_backend.h"
#ifdef MOE_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace moe {

absl::Status ExpertBackend::CheckLayer(int64_t layer, bool need_gate,
                                       bool need_shared,
                                       bool need_all_experts) const {
  MOE_ASSIGN_OR_RETURN(const LayerShard shard, Shard(layer));
  return CheckLayerShard(layer, shard, need_gate, need_shared,
                         need_all_experts);
}

absl::StatusOr<const float*> ExpertBackend::EnterExperts(int64_t layer,
                                                         const float* x,
                                                         int64_t /*n*/) {
  if (!config().has_expert_frame()) return x;
  return absl::UnimplementedError(
      absl::StrCat(name(), " cannot compute layer ", layer,
                   "'s latent projections or branch norms"));
}

absl::Status ExpertBackend::LeaveExperts(int64_t layer, float* /*s*/,
                                         int64_t /*n*/, float* /*y*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " cannot compute layer ", layer,
                   "'s latent projections or branch norms"));
}

absl::StatusOr<std::unique_ptr<ExpertBackend>> CreateExpertBackend(
    const std::string& device, int threads) {
  MOE_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(device));
  if (!spec.cuda) return std::make_unique<CpuBackend>(threads);
#ifdef MOE_HAVE_CUDA
  return CreateCudaBackend(spec.ordinal);
#else
  return absl::UnimplementedError(
      absl::StrCat("--device ", device,
                   ": this build has no CUDA backend (configure with "
                   "-DMOE_CUDA=ON where the CUDA toolkit is installed)"));
#endif
}

}  // namespace moe

#include "server/router_model.h"

#include "absl/strings/str_cat.h"
#include "core/device_spec.h"
#include "core/logging.h"
#include "core/status_macros.h"
#ifdef MOE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/cuda_weights.h"
#endif

namespace moe {

absl::StatusOr<std::unique_ptr<RouterModel>> RouterModel::Load(
    const Options& o) {
  MOE_ASSIGN_OR_RETURN(auto source, OpenModel(o.location));
  auto m = std::unique_ptr<RouterModel>(new RouterModel());
  m->info_ = source->info();
  m->location_ = o.location;
  m->dtype_ = o.dtype;
  LoadOptions lo;
  lo.dtype = o.dtype;
  lo.num_threads = o.threads;
  if (!o.all_experts) {
    lo.expert_begin = 0;
    lo.expert_end = 0;
  }
  MOE_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(o.device));
  if (!spec.cuda) {
    for (int64_t layer : m->info_.moe_layers) {
      MOE_ASSIGN_OR_RETURN(m->layers_[layer],
                           LoadLayerWeights(*source, layer, lo));
    }
  } else {
#ifdef MOE_HAVE_CUDA
    const int ordinal = spec.ordinal;
    MOE_RETURN_IF_ERROR(CudaDeviceAvailable(ordinal));
    MOE_CUDA_OK(cudaSetDevice(ordinal));
    m->device_ = absl::StrCat("cuda:", ordinal);
    m->cuda_device_ = ordinal;
    for (int64_t layer : m->info_.moe_layers) {
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<CudaLayerWeights> w,
                           UploadLayerWeights(*source, layer, lo));
      m->cuda_layers_[layer] = std::move(w);
    }
#else
    return absl::UnimplementedError(absl::StrCat(
        "--device ", o.device, ": this build has no CUDA backend"));
#endif
  }
  spdlog::info(
      "model {} ({}) on {}: {} MoE layers, H={} I={} E={} k={} shared={}",
      m->info_.source, m->info_.family, m->device_, m->info_.moe_layers.size(),
      m->info_.layer.hidden, m->info_.layer.inter, m->info_.layer.num_experts,
      m->info_.layer.top_k, m->info_.layer.shared_inter);
  return m;
}

const CudaLayerWeights* RouterModel::cuda_layer(int64_t layer) const {
  auto it = cuda_layers_.find(layer);
  return it == cuda_layers_.end() ? nullptr : it->second.get();
}

const LayerWeights* RouterModel::layer(int64_t layer) const {
  auto it = layers_.find(layer);
  return it == layers_.end() ? nullptr : it->second.get();
}

}  // namespace moe

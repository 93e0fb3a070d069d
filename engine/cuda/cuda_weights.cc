#include "engine/cuda/cuda_weights.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "engine/weight_values.h"

namespace moe {
namespace {

absl::StatusOr<DeviceBuffer> Upload(const void* data, size_t bytes) {
  MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  if (bytes > 0)
    MOE_CUDA_OK(cudaMemcpy(b.data(), data, bytes, cudaMemcpyHostToDevice));
  return b;
}

absl::StatusOr<WeightTensor> Fetch(const ModelSource& src, int64_t layer,
                                   WeightRole role, int64_t expert) {
  MOE_ASSIGN_OR_RETURN(WeightTensor t, src.Get(layer, role, expert));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(t, src.info().layer, role));
  return t;
}

absl::StatusOr<CudaExpert> UploadExpert(const ModelSource& src, int64_t layer,
                                        int64_t expert, bool shared) {
  const MoeLayerConfig& c = src.info().layer;
  CudaExpert e;
  e.inter = shared ? c.shared_inter : c.inter;
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w1,
      Fetch(src, layer, shared ? WeightRole::kSharedW1 : WeightRole::kW1,
            expert));
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w3,
      Fetch(src, layer, shared ? WeightRole::kSharedW3 : WeightRole::kW3,
            expert));
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w2,
      Fetch(src, layer, shared ? WeightRole::kSharedW2 : WeightRole::kW2,
            expert));
  MOE_ASSIGN_OR_RETURN(WeightValues<uint16_t> v1, WeightsAsBf16(w1));
  MOE_ASSIGN_OR_RETURN(WeightValues<uint16_t> v3, WeightsAsBf16(w3));
  MOE_ASSIGN_OR_RETURN(WeightValues<uint16_t> v2, WeightsAsBf16(w2));
  const size_t half = static_cast<size_t>(e.inter * c.hidden);
  std::vector<uint16_t> w13(2 * half);
  std::memcpy(w13.data(), v1.data, half * 2);
  std::memcpy(w13.data() + half, v3.data, half * 2);
  MOE_ASSIGN_OR_RETURN(e.w13, Upload(w13.data(), w13.size() * 2));
  MOE_ASSIGN_OR_RETURN(e.w2, Upload(v2.data, half * 2));
  return e;
}

absl::StatusOr<std::vector<float>> Vector(const ModelSource& src, int64_t layer,
                                          WeightRole role) {
  MOE_ASSIGN_OR_RETURN(WeightTensor t, Fetch(src, layer, role, -1));
  MOE_ASSIGN_OR_RETURN(WeightValues<float> v, WeightsAsF32(t));
  return std::vector<float>(v.data, v.data + t.numel());
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLayerWeights>> UploadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options) {
  const MoeLayerConfig& c = source.info().layer;
  if (!source.info().HasLayer(layer)) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " is not an MoE layer"));
  }
  auto w = std::make_unique<CudaLayerWeights>();
  w->layer = layer;
  w->config = c;
  MOE_ASSIGN_OR_RETURN(std::tie(w->expert_begin, w->expert_end),
                       ResolveExpertRange(options, c.num_experts));
  if (options.layer_experts.count(layer) > 0) {
    // Redundant experts (engine/placement.h) are CPU-only for now.
    return absl::UnimplementedError(
        "the CUDA backend loads contiguous expert ranges only, not the slot "
        "list of a redundant placement (--redundant-experts)");
  }
  if (options.load_gate) {
    MOE_ASSIGN_OR_RETURN(std::vector<float> gate,
                         Vector(source, layer, WeightRole::kGate));
    MOE_ASSIGN_OR_RETURN(w->gate, Upload(gate.data(), gate.size() * 4));
    if (c.use_bias) {
      MOE_ASSIGN_OR_RETURN(w->expert_bias,
                           Vector(source, layer, WeightRole::kExpertBias));
      MOE_ASSIGN_OR_RETURN(
          w->expert_bias_dev,
          Upload(w->expert_bias.data(), w->expert_bias.size() * 4));
    }
    w->has_gate = true;
  }
  if (options.load_shared && c.has_shared()) {
    MOE_ASSIGN_OR_RETURN(w->shared, UploadExpert(source, layer, -1, true));
    if (c.shared_gate) {
      MOE_ASSIGN_OR_RETURN(std::vector<float> g,
                           Vector(source, layer, WeightRole::kSharedGate));
      MOE_ASSIGN_OR_RETURN(w->shared_gate, Upload(g.data(), g.size() * 4));
    }
    w->has_shared = true;
  }
  for (int64_t e = w->expert_begin; e < w->expert_end; ++e) {
    MOE_ASSIGN_OR_RETURN(CudaExpert x, UploadExpert(source, layer, e, false));
    w->experts.push_back(std::move(x));
  }
  return w;
}

}  // namespace moe

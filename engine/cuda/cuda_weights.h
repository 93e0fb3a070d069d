// One MoE layer's weights on a GPU, uploaded once: experts in bf16 (gate and
// up fused into one [2I, H] matrix, then down [H, I]), the router's gate,
// expert bias and shared-expert gate in fp32.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "engine/cuda/device_buffer.h"
#include "engine/layer_weights.h"

namespace moe {

struct CudaExpert {
  DeviceBuffer w13;  // bf16 [2*inter, H]: W1 rows then W3 rows
  DeviceBuffer w2;   // bf16 [H, inter]
  int64_t inter = 0;
  size_t bytes() const { return w13.size() + w2.size(); }
};

struct CudaLayerWeights {
  int64_t layer = 0;
  MoeLayerConfig config;
  bool has_gate = false;
  DeviceBuffer gate;               // fp32 [E, H]
  std::vector<float> expert_bias;  // host copy, for routing on the host
  DeviceBuffer expert_bias_dev;    // fp32 [E]
  bool has_shared = false;
  CudaExpert shared;
  DeviceBuffer shared_gate;  // fp32 [1, H]
  int64_t expert_begin = 0, expert_end = 0;
  std::vector<CudaExpert> experts;
  int64_t num_local_experts() const { return expert_end - expert_begin; }
};

// Uploads to the current CUDA device. `options` as for LoadLayerWeights
// (the dtype is always bf16 on the GPU).
absl::StatusOr<std::unique_ptr<CudaLayerWeights>> UploadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options);

}  // namespace moe

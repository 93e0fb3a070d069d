// The router's share of the model: for every MoE layer the gate (fp32),
// the expert bias and the shared expert, plus all routed experts when the
// router computes them itself (no workers).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model_location.h"
#include "engine/layer_weights.h"

namespace moe {

struct CudaLayerWeights;  // engine/cuda/cuda_weights.h, CUDA builds only

class RouterModel {
 public:
  struct Options {
    ModelLocation location;
    WeightDType dtype = WeightDType::kF32;
    bool all_experts = false;  // P = 0: the router runs the experts
    int threads = 1;
    std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
  };
  static absl::StatusOr<std::unique_ptr<RouterModel>> Load(const Options& o);

  const ModelInfo& info() const { return info_; }
  const ModelLocation& location() const { return location_; }
  WeightDType dtype() const { return dtype_; }
  // "cpu" or "cuda:N".
  const std::string& device() const { return device_; }
  int cuda_device() const { return cuda_device_; }
  // Null when `layer` is not an MoE layer (or lives on the other device).
  const LayerWeights* layer(int64_t layer) const;
  const CudaLayerWeights* cuda_layer(int64_t layer) const;

 private:
  ModelInfo info_;
  ModelLocation location_;
  WeightDType dtype_ = WeightDType::kF32;
  std::string device_ = "cpu";
  int cuda_device_ = -1;
  std::map<int64_t, std::unique_ptr<LayerWeights>> layers_;
  // shared_ptr: its deleter is made where the type is complete (CUDA builds).
  std::map<int64_t, std::shared_ptr<const CudaLayerWeights>> cuda_layers_;
};

}  // namespace moe

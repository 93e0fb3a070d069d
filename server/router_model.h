// The router's share of the model: for every MoE layer the gate (fp32),
// the expert bias and the shared expert, plus all routed experts when the
// router computes them itself (no workers).
#pragma once

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "core/model_location.h"
#include "engine/layer_weights.h"

namespace moe {

class RouterModel {
 public:
  struct Options {
    ModelLocation location;
    WeightDType dtype = WeightDType::kF32;
    bool all_experts = false;  // P = 0: the router runs the experts
    int threads = 1;
  };
  static absl::StatusOr<std::unique_ptr<RouterModel>> Load(const Options& o);

  const ModelInfo& info() const { return info_; }
  const ModelLocation& location() const { return location_; }
  WeightDType dtype() const { return dtype_; }
  // Null when `layer` is not an MoE layer.
  const LayerWeights* layer(int64_t layer) const;

 private:
  ModelInfo info_;
  ModelLocation location_;
  WeightDType dtype_ = WeightDType::kF32;
  std::map<int64_t, std::unique_ptr<LayerWeights>> layers_;
};

}  // namespace moe

// The router's share of the model, on its device: for every MoE layer the
// gate (fp32), the expert bias and the shared expert, plus all routed
// experts when the router computes them itself (no workers). Held by one
// backend; each step in flight works on a fork of it (same weights, its own
// workspaces).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model_location.h"
#include "core/serving_defaults.h"
#include "engine/expert_backend.h"
#include "engine/layer_weights.h"

namespace moe {

class RouterModel {
 public:
  struct Options {
    ModelLocation location;
    WeightDType dtype = WeightDType::kF32;
    bool all_experts = false;  // P = 0: the router runs the experts
    int threads = 1;
    std::string device = "cpu";                   // "cpu", "cuda" or "cuda:N"
    int64_t max_tokens = kDefaultMaxBatchTokens;  // tokens per step at most
  };
  static absl::StatusOr<std::unique_ptr<RouterModel>> Load(const Options& o);

  const ModelInfo& info() const { return info_; }
  const ModelLocation& location() const { return location_; }
  WeightDType dtype() const { return dtype_; }
  // Returns "cpu" or "cuda:N".
  std::string device() const { return backend_->name(); }
  // Makes a backend over the loaded weights for one step in flight.
  absl::StatusOr<std::unique_ptr<ExpertBackend>> ForkBackend() const {
    return backend_->Fork();
  }

 private:
  ModelInfo info_;
  ModelLocation location_;
  WeightDType dtype_ = WeightDType::kF32;
  std::unique_ptr<ExpertBackend> backend_;
};

}  // namespace moe

// One worker's part of an expert-parallel MoE step (docs/architecture.md
// section 2): permute own rows by destination expert, all-to-all dispatch
// with the plan's sizes, grouped SwiGLU over the local experts, all-to-all
// combine, weighted sum in slot order. One implementation per device kind.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "engine/layer_weights.h"
#include "gloo/rendezvous/store.h"
#include "moe/v1/worker.pb.h"
#include "worker/comm/communicator.h"

namespace moe {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual std::string device() const = 0;

  // Loads experts [begin, end) of every MoE layer of `source`, replacing
  // what was loaded before; workspaces are sized for max_batch_tokens.
  virtual absl::Status Load(const ModelSource& source, int64_t begin,
                            int64_t end, WeightDType dtype,
                            int64_t max_batch_tokens) = 0;

  // Joins a collective group through `store`: Gloo on CPU, NCCL on GPU.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      int rank, int world, const std::string& host,
      gloo::rendezvous::Store& store, std::chrono::milliseconds timeout) = 0;

  // Runs `step` as rank comm.rank() of comm.size(); fills `result` (rows,
  // timing, rows computed).
  virtual absl::Status Run(const moe::v1::Step& step, Communicator& comm,
                           moe::v1::StepResult* result) = 0;
};

// What a worker loads: experts [begin, end) of a layer, no gate and no
// shared expert (the router's).
LoadOptions WorkerLoadOptions(int64_t begin, int64_t end);

// The time a step may take on this worker, from the router's deadline.
inline std::chrono::milliseconds StepTimeout(const moe::v1::Step& step) {
  return std::chrono::milliseconds(std::max<int64_t>(step.timeout_ms(), 1));
}

// "cpu" or "cuda:N" (builds with the CUDA backend only).
absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(
    const std::string& device, int threads);

}  // namespace moe

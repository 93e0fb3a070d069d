// A worker's part of each expert-parallel step: runs the engine's one step
// (engine/ep_step.h) on this worker's backend over the group's
// communicator, on rows its caller decodes (worker/step_message.h reads
// and writes the router's messages; this class sees no wire type). Also
// picks the communicator: NCCL between GPUs, Gloo between hosts' memory
// (CPU workers, or CUDA workers staging through pinned memory, e.g.
// several on one GPU).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "comm/collective.h"
#include "comm/communicator.h"
#include "core/device_spec.h"
#include "core/model_source.h"
#include "engine/ep_step.h"
#include "engine/expert_backend.h"
#include "engine/layer_weights.h"
#include "gloo/rendezvous/store.h"
#include "worker/expert_shard.h"

namespace moe {

// What a step is besides its rows.
struct StepHeader {
  uint64_t step_id = 0;
  int64_t layer = 0;
  uint64_t placement_epoch = 0;  // the placement the step was planned for
  bool direct = false;           // no collective (docs/architecture.md)
};

// Fills `in` with the step's rows for a layer of width `hidden`: views into
// the caller's message, or rows widened into `scratch` (which only grows).
using StepDecoder = absl::FunctionRef<absl::Status(
    int64_t hidden, std::vector<float>* scratch, EpStepInput* in)>;

// What a step produced; the views are valid until the next Run.
struct StepOutput {
  int64_t tokens = 0, slots = 0, hidden = 0;
  const float* y = nullptr;  // [tokens, hidden], unless direct
  DirectOutputs direct;      // a direct step's expert outputs
  EpStepTimes times;
  double decode_us = 0;  // start of Run to the rows decoded
};

class StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<StepExecutor>> Create(
      const std::string& device, int threads, Collective collective);

  std::string device() const { return backend_->name(); }
  // The device's identity (engine/expert_backend.h); empty on a CPU.
  std::string device_identity() const { return backend_->device_identity(); }
  // True when this worker was told to exchange through host memory
  // (--collective gloo), so that it may share its device with other workers.
  bool shares_device() const { return shares_device_; }
  // The collective this worker joins groups with (auto resolved).
  Collective collective() const { return collective_; }

  // Loads `shard` of every MoE layer of `source`, replacing what was loaded
  // before; workspaces are sized for max_batch_tokens.
  absl::Status Load(const ModelSource& source, const ExpertShard& shard,
                    WeightDType dtype, int64_t max_batch_tokens,
                    uint64_t placement_epoch = 0);
  // Live rebalancing, from any thread while steps run: loads `shard` into a
  // backend of its own as the weights of placement `epoch`. The first Step
  // that names `epoch` switches to it (and drops the old weights).
  absl::Status Stage(const ModelSource& source, const ExpertShard& shard,
                     WeightDType dtype, uint64_t epoch);

  // Joins a collective group through `store`.
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      int rank, int world, const std::string& host,
      gloo::rendezvous::Store& store, std::chrono::milliseconds timeout);

  // Runs the step `header` names as rank comm.rank() of comm.size(), on the
  // rows `decode` gives once the placement and layer are checked: switches
  // to a staged placement the step names, FAILED_PRECONDITION for one it
  // does not hold, NOT_FOUND for a layer it has no weights of,
  // RESOURCE_EXHAUSTED for more rows than it was loaded for.
  absl::Status Run(const StepHeader& header, StepDecoder decode,
                   Communicator& comm, StepOutput* out);
  // After a failed Run: whether `comm` is still usable for the next step
  // (the step was refused before its first collective). See
  // EpStep::collectives_intact.
  bool collectives_intact() const { return collectives_intact_; }

 private:
  StepExecutor(std::unique_ptr<ExpertBackend> backend, DeviceSpec spec,
               Collective collective, bool shares_device, std::string device,
               int threads)
      : backend_(std::move(backend)),
        device_(std::move(device)),
        threads_(threads),
        spec_(spec),
        collective_(collective),
        shares_device_(shares_device) {}

  std::unique_ptr<ExpertBackend> backend_;
  std::string device_;
  int threads_;
  DeviceSpec spec_;
  Collective collective_;
  bool shares_device_;
  int64_t max_tokens_ = 0;
  int64_t physical_experts_ = 0;  // E + R: what step ids and counts name
  uint64_t epoch_ = 0;            // placement epoch of backend_
  // A staged placement's weights, waiting for its first step.
  absl::Mutex staged_mu_;
  std::unique_ptr<ExpertBackend> staged_ ABSL_GUARDED_BY(staged_mu_);
  uint64_t staged_epoch_ ABSL_GUARDED_BY(staged_mu_) = 0;
  int64_t staged_physical_ ABSL_GUARDED_BY(staged_mu_) = 0;
  std::atomic<int64_t> staged_max_tokens_{0};
  bool collectives_intact_ = true;
  EpStep step_;
  std::vector<float> scratch_, y_;
};

// "cpu" or "cuda:N" (builds with the CUDA backend only).
absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(
    const std::string& device, int threads,
    Collective collective = Collective::kAuto);

}  // namespace moe

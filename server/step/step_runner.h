// One batched step of a layer, on the router, for any device: routing in
// fp32 on the router's backend, then the experts in-process (no workers:
// the single-process layer) or on the worker group, with the shared expert
// computed while the workers work, and the results put together.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/expert_backend.h"
#include "engine/local_moe.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"
#include "server/step/remote_step.h"
#include "server/step/router_model.h"
#include "server/step/step_group.h"
#include "server/step/step_request.h"

namespace moe {

class StepRunner {
 public:
  using Output = StepOutput;

  // `pool` null: the router computes the experts (P = 0). `remote`: how
  // rows cross the workers' all-to-all and which steps skip it (nothing
  // crosses at P = 0).
  StepRunner(std::unique_ptr<ExpertBackend> backend, StepGroup* pool,
             RemoteStepOptions remote = {});

  // Runs `request` into `out`. Of the request's fields:
  // `segment_ends`: the requests batched in this step (see TokenRouter).
  // `bf16_out`: every request of the step wants its answer in bf16. In a
  // layer without shared experts the routed sum is the answer, so the
  // workers send it in bf16 (Step.result_dtype, half the bytes): rounding
  // it there is the answer's one rounding, the same bits as rounding the
  // fp32 answer here. With shared experts it stays fp32 until the shared
  // part is added, so the answer is still rounded once.
  // `token_ids`: one per row for a hash-routed layer (else may be empty).
  absl::Status Run(const StepRequest& request, Output* out);

 private:
  std::unique_ptr<ExpertBackend> backend_;
  StepGroup* pool_;
  LocalMoe local_;
  std::vector<float> shared_out_;
  std::vector<float> routed_;  // the experts' weighted sum, framed layers
  RemoteStep remote_;
};

// Builds a runner on a fork of the model's backend.
absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, StepGroup* pool, RemoteStepOptions remote = {});

}  // namespace moe

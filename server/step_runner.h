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
#include "server/remote_step.h"
#include "server/router_model.h"
#include "server/worker_pool.h"

namespace moe {

class StepRunner {
 public:
  struct Output {
    std::vector<float> y;  // [n, H] in its first n * H values
    Routing routing;
    StageTimes times;
    std::vector<int64_t> worker_rows;  // rows each worker computed
  };

  // `pool` null: the router computes the experts (P = 0). `remote`: how
  // rows cross the workers' all-to-all and which steps skip it (nothing
  // crosses at P = 0).
  StepRunner(std::unique_ptr<ExpertBackend> backend, WorkerPool* pool,
             RemoteStepOptions remote = {});

  // `segment_ends`: the requests batched in this step (see TokenRouter).
  // `bf16_out`: every request of the step wants its answer in bf16. In a
  // layer without shared experts the routed sum is the answer, so the
  // workers send it in bf16 (Step.result_dtype, half the bytes): rounding
  // it there is the answer's one rounding, the same bits as rounding the
  // fp32 answer here. With shared experts it stays fp32 until the shared
  // part is added, so the answer is still rounded once.
  // `token_ids`: one per row for a hash-routed layer (else may be empty).
  absl::Status Run(int64_t layer, const float* x, int64_t n,
                   absl::Span<const int64_t> segment_ends, bool bf16_out,
                   std::chrono::steady_clock::time_point deadline, Output* out,
                   absl::Span<const int64_t> token_ids = {});

 private:
  std::unique_ptr<ExpertBackend> backend_;
  WorkerPool* pool_;
  LocalMoe local_;
  std::vector<float> shared_out_;
  std::vector<float> routed_;  // the experts' weighted sum, framed layers
  RemoteStep remote_;
};

// A runner on a fork of the model's backend.
absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, WorkerPool* pool, RemoteStepOptions remote = {});

}  // namespace moe

// The router's side of a step run on the workers, for any router device:
// each rank's Step (its token shard, slots and the full per-(source,
// expert) count matrix, from engine/ep_plan.h's PlanDispatch; or, for a
// direct step, the rows its experts need, engine/direct_plan.h), the shared
// expert meanwhile, and the ranks' results put together. Plain structs
// both ways (proto/step_views.h): the group encodes and decodes the wire.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ep_plan.h"
#include "engine/placement.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"
#include "proto/step_views.h"
#include "server/step/direct_step.h"
#include "server/step/step_group.h"
#include "server/step/step_request.h"

namespace moe {

struct RemoteStepOptions {
  // Chooses how rows cross the workers' all-to-all (--dispatch-dtype).
  DispatchDType dispatch = DispatchDType::kRowType;
  // Steps of at most this many tokens over 2 or more workers are direct
  // (--direct-step-tokens); 0: none.
  int64_t direct_step_tokens = 0;
};

// Runs everything of a routed step that happens on the worker group: the plan,
// the step on every rank, the shared expert on this thread meanwhile, and the
// results put together. Keeps its plan buffers between steps (the group keeps
// the wire messages').
class RemoteStep {
 public:
  explicit RemoteStep(RemoteStepOptions options = {}) : options_(options) {}

  // Returns the gated shared-expert output [n, H] to add to y, or null.
  using SharedFn = std::function<absl::StatusOr<const float*>()>;

  // Runs `request`'s experts on `group` into out->y, with out->routing
  // already filled. `clock` was started with the step and lapped after
  // routing (out->times.route_us); fills the plan, worker, shared and
  // combine times and the total. The workers answer their rows rounded to
  // bf16 (Step.result_dtype, half the bytes home) when the request wants
  // bf16 and `config` has no shared expert to add here.
  absl::Status Run(StepGroup& group, const StepRequest& request,
                   const MoeLayerConfig& config, const SharedFn& shared,
                   StageClock& clock, StepOutput* out);

  // Returns the rows each worker computed in the last step.
  const std::vector<int64_t>& worker_rows() const { return worker_rows_; }

 private:
  // Holds what a step is planned from: the rows x [n, config.hidden], their
  // routing, and how the workers answer.
  struct Planned {
    int64_t layer = 0;
    const float* x = nullptr;
    int64_t n = 0;
    const MoeLayerConfig* config = nullptr;
    const Routing* routing = nullptr;
    bool bf16_result = false;
  };
  // Builds one step per rank of `world` from the routing, planned with
  // `placement` (the group's, redundant experts: engine/placement.h; null:
  // contiguous).
  void BuildSteps(const Planned& p, int world,
                  const PlacementInForce& placement);
  // Writes each rank's rows into y.
  absl::Status GatherResults(int64_t n, int64_t hidden, float* y) const;
  // Writes the critical worker's stage times into t, and the wire time;
  // `wall_us`: the step's time on the worker group, seen from here.
  void CriticalWorkerTimes(double wall_us, StageTimes* t) const;

  RemoteStepOptions options_;
  bool direct_ = false;  // the last step was direct
  DirectStep direct_step_;
  // Holds, per layer, the replicas built on first use, for placement epoch
  // replicas_epoch_.
  std::map<int64_t, ReplicaMap> replicas_;
  uint64_t replicas_epoch_ = 0;
  std::vector<int64_t> worker_rows_;
  std::vector<StepContent> steps_;  // views of x and the buffers here
  std::vector<StepReply> results_;  // views of the received messages
  std::vector<int32_t> expert_ids_;
  std::vector<int64_t> counts_;
};

}  // namespace moe

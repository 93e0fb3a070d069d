// The single-process MoE layer (P = 0): the expert-parallel step of
// engine/ep_step.h at world size 1 over a loopback communicator, between the
// backend's routing and its shared expert. Every test of this engine also
// tests the distributed step's code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "engine/caller_overrides.h"
#include "engine/ep_step.h"
#include "engine/expert_backend.h"
#include "engine/route_rows.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

// What a forward may give back besides y and the routing, each where
// its pointer is not null.
struct ForwardExtras {
  // [n, H]: the shared experts' output of the segments that ask for it
  // apart (SharedPart::kSeparate; zeros elsewhere: PlaceShared). Needed
  // when any segment of rows.caller wants other than SharedPart::kAdd.
  float* shared_out = nullptr;
  // The time each stage took.
  StageTimes* times = nullptr;
};

class LocalMoe {
 public:
  // Runs on `backend`, which must hold the gate, the shared expert and every
  // routed expert of the layers it is asked for.
  explicit LocalMoe(ExpertBackend* backend);
  ~LocalMoe();

  // Loads every MoE layer of `source` (or just `only_layer`), whole, onto a
  // new backend on `device` ("cpu", "cuda[:N]") sized for steps of up to
  // `max_tokens` tokens.
  static absl::StatusOr<std::unique_ptr<LocalMoe>> Create(
      const ModelSource& source, const std::string& device, WeightDType dtype,
      int threads, int64_t max_tokens, int64_t only_layer = -1);

  // y [rows.n, H] = MoE(x [rows.n, H]) of `layer`. `rows` as for
  // TokenRouter::Route: the requests' ends, the token ids and the callers'
  // overrides (the segments' routing from the caller and what each does
  // with the shared experts). `routing` receives the routing decisions.
  // Without caller overrides the step runs the path of a plain step, bit
  // for bit.
  absl::Status Forward(int64_t layer, const float* x, const RouteRows& rows,
                       float* y, Routing* routing,
                       const ForwardExtras& extras = {});

  // The same for bf16 rows x [n, H] (a bf16 request): a device backend
  // uploads them as bf16 and widens them there; others get them widened
  // here, exactly, which gives Forward's bits for the widened rows.
  absl::Status ForwardBf16(int64_t layer, const uint16_t* x,
                           const RouteRows& rows, float* y, Routing* routing,
                           const ForwardExtras& extras = {});

  ExpertBackend& backend() { return *backend_; }

 private:
  // Forward's checks before anything is routed.
  absl::Status Check(int64_t layer, int64_t n) const;
  // What Step does with the shared experts beyond the plain step's path:
  // which rows want them, and where the part answered apart goes.
  struct SharedPlan {
    SharedRows rows;
    float* out = nullptr;
  };
  // The rows a step runs: y [n, H] from x [n, H].
  struct StepRows {
    const float* x = nullptr;
    int64_t n = 0;
    float* y = nullptr;
  };
  // Forward after the routing: `step_rows.x` names the rows the backend holds.
  absl::Status Step(int64_t layer, StepRows step_rows, const Routing& routing,
                    StageTimes& t, StageClock& clock, const SharedPlan& shared);

  std::unique_ptr<ExpertBackend> owned_;
  ExpertBackend* backend_;
  std::unique_ptr<Communicator> loopback_;
  EpStep step_;
  std::vector<int32_t> expert_ids_;
  std::vector<int64_t> counts_;
  std::vector<float> shared_out_;
  std::vector<float> routed_;   // the experts' weighted sum, framed layers
  std::vector<float> widened_;  // ForwardBf16's rows for fp32 backends
};

// The shared experts' output [n, H] into `out` for the rows `rows` names
// (other rows are left as they were), one backend call per run of such
// segments.
absl::Status SharedForSegments(ExpertBackend& backend, int64_t layer,
                               const float* x, int64_t n,
                               const SharedRows& rows, float* out);

}  // namespace moe

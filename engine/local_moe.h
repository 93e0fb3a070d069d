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
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

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

  // y [n, H] = MoE(x [n, H]) of `layer`. `segment_ends` and `token_ids` as
  // for TokenRouter::Route. `routing` receives the routing decisions;
  // `times` (optional) the stages. `caller` (optional): the segments'
  // routing from the caller and what each does with the shared experts;
  // when any segment wants other than SharedPart::kAdd, `shared_out`
  // [n, H] receives the shared experts' output of the kSeparate segments
  // (zeros elsewhere: PlaceShared). Without it the step runs the path of
  // a plain step, bit for bit.
  absl::Status Forward(int64_t layer, const float* x, int64_t n,
                       absl::Span<const int64_t> segment_ends, float* y,
                       Routing* routing, StageTimes* times = nullptr,
                       absl::Span<const int64_t> token_ids = {},
                       const CallerOverrides* caller = nullptr,
                       float* shared_out = nullptr);

  // The same for bf16 rows x [n, H] (a bf16 request): a device backend
  // uploads them as bf16 and widens them there; others get them widened
  // here, exactly, which gives Forward's bits for the widened rows.
  absl::Status ForwardBf16(int64_t layer, const uint16_t* x, int64_t n,
                           absl::Span<const int64_t> segment_ends, float* y,
                           Routing* routing, StageTimes* times = nullptr,
                           absl::Span<const int64_t> token_ids = {},
                           const CallerOverrides* caller = nullptr,
                           float* shared_out = nullptr);

  ExpertBackend& backend() { return *backend_; }

 private:
  // Forward's checks before anything is routed.
  absl::Status Check(int64_t layer, int64_t n) const;
  // What Step does with the shared experts beyond the plain step's path.
  struct SharedPlan {
    absl::Span<const int64_t> segment_ends;
    const CallerOverrides* caller = nullptr;
    float* out = nullptr;
    // x names rows resident on the backend, not host rows: the shared
    // experts then run over all of them or none.
    bool resident_only = false;
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

// The shared experts' output [n, H] into `out` for the rows of the
// segments of `caller` that need it (not SharedPart::kSkip; other rows are
// left as they were), one backend call per run of such segments; over all
// n rows when `whole` (rows resident on a device, named by x).
absl::Status SharedForSegments(ExpertBackend& backend, int64_t layer,
                               const float* x, int64_t n,
                               absl::Span<const int64_t> segment_ends,
                               const CallerOverrides& caller, bool whole,
                               float* out);

}  // namespace moe

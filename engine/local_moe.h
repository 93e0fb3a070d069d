// The single-process MoE layer (P = 0): route, permute by expert, grouped
// SwiGLU, weighted combine in slot order, plus the shared expert. The same
// pieces a worker runs, without the all-to-all.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/expert_runner.h"
#include "engine/layer_weights.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

class LocalMoe {
 public:
  explicit LocalMoe(int num_threads) : threads_(num_threads) {}

  // y [n, H] = MoE(x [n, H]). `segment_ends` as for TokenRouter::Route.
  // `routing` receives the routing decisions; `times` (optional) the stages.
  absl::Status Forward(const LayerWeights& w, const float* x, int64_t n,
                       absl::Span<const int64_t> segment_ends, float* y,
                       Routing* routing, StageTimes* times = nullptr);

  int num_threads() const { return threads_; }

 private:
  int threads_;
  TokenRouter router_;
  ExpertRunner runner_;
  std::vector<int32_t> slot_expert_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> order_;
  std::vector<int64_t> slot_row_;
  std::vector<int64_t> src_row_;
  std::vector<float> scale_;
  std::vector<float> scaled_in_;
  std::vector<float> expert_out_;
  std::vector<float> shared_out_;
  std::vector<const float*> in_rows_;
  std::vector<float*> out_rows_;
};

}  // namespace moe

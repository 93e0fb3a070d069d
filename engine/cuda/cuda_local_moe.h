// The whole MoE layer on one GPU (no workers): routing, permute, grouped
// SwiGLU, combine in slot order, shared expert. Used by the router with
// --num-workers 0 --device cuda, by moe-bench and by the tests. Workspaces
// are sized at creation for max_tokens; Forward allocates nothing.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_router.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

// Most rows a batch of `tokens` sends through the experts: k per token, or
// the capacity of expert choice (at most max(k, capacity factor) per token).
int64_t MaxExpertRows(const MoeLayerConfig& c, int64_t tokens);
// Most routing slots a token can have: k, or E under expert choice.
int64_t MaxSlots(const MoeLayerConfig& c);

class CudaLocalMoe {
 public:
  static absl::StatusOr<std::unique_ptr<CudaLocalMoe>> Create(
      int device, const MoeLayerConfig& config, int64_t max_tokens);
  ~CudaLocalMoe();

  // y [n, H] (host) = MoE(x [n, H] (host)).
  absl::Status Forward(const CudaLayerWeights& w, const float* x, int64_t n,
                       absl::Span<const int64_t> segment_ends, float* y,
                       Routing* routing, StageTimes* times = nullptr);

  LtMatmul& lt() { return *lt_; }
  cudaStream_t stream() const { return stream_; }

 private:
  int device_ = 0;
  MoeLayerConfig config_;
  int64_t max_tokens_ = 0, max_rows_ = 0, max_slots_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t marks_[4] = {};
  std::unique_ptr<LtMatmul> lt_;
  std::unique_ptr<CudaRouter> router_;
  std::unique_ptr<CudaExperts> experts_;
  DeviceBuffer x_, xb_, perm_, out_, y_, shared_out_, gate_logit_;
  DeviceBuffer src_row_, scale_, slot_row_, weights_;
  PinnedBuffer host_x_, host_y_, host_i32_, host_f32_;
  std::vector<int64_t> offsets_, order_;
  std::vector<int32_t> slot_expert_;
  std::vector<const CudaExpert*> expert_ptrs_;
};

}  // namespace moe

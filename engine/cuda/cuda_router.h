// The router's math on a GPU: the gate GEMM in fp32 through cuBLASLt, then
// the fused routing kernel (token choice without a capacity limit), or, for
// a capacity limit and expert choice, the host's routing of the copied
// logits, which is the CPU path's own code. The result lands on the host,
// where the router plans the dispatch.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/token_router.h"

namespace moe {

class CudaRouter {
 public:
  static absl::StatusOr<std::unique_ptr<CudaRouter>> Create(
      const MoeLayerConfig& config, int64_t max_tokens);

  // Routes n tokens whose fp32 rows are at `x` (device). `token_ids` (one
  // per row, host) are what a hash-routed layer routes by: checked first
  // (CheckTokenIds), ignored by other layers. Synchronises `stream`.
  absl::Status Route(LtMatmul& lt, const CudaLayerWeights& w, const float* x,
                     int64_t n, absl::Span<const int64_t> segment_ends,
                     absl::Span<const int64_t> token_ids, cudaStream_t stream,
                     Routing* out);

 private:
  MoeLayerConfig config_;
  int64_t max_tokens_ = 0;
  DeviceBuffer logits_, idx_, weights_, token_ids_;
  PinnedBuffer host_logits_, host_idx_, host_weights_, host_token_ids_;
  TokenRouter host_;
};

}  // namespace moe

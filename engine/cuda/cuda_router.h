// The router's math on a GPU: the gate GEMM in fp32 through cuBLASLt, then
// the fused routing kernel (token choice without a capacity limit), or, for
// a capacity limit and expert choice, the host's routing of the logits,
// which is the CPU path's own code. What comes home, and when the host
// waits for it, is the backend's host logic (engine/device_backend.h).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/device_backend.h"
#include "engine/token_router.h"

namespace moe {

class CudaRouter {
 public:
  static absl::StatusOr<std::unique_ptr<CudaRouter>> Create(
      const MoeLayerConfig& config, int64_t max_tokens);

  // Queues the routing of query.n tokens whose fp32 rows are at `x`
  // (device) on `queue`, and says in *answer where it leaves its result:
  // the logits when the layer is routed on the host or query.host_logits.
  // query.token_ids are what a hash-routed layer routes by: checked first
  // (CheckTokenIds), ignored by other layers.
  absl::Status Queue(LtMatmul& lt, const CudaLayerWeights& w, const float* x,
                     const DeviceRouteQuery& query, DeviceStepQueue& queue,
                     cudaStream_t stream, DeviceRouteAnswer* answer);
  // The host's routing of the downloaded logits [n, E], where Queue left
  // logits.
  absl::Status RouteLogits(const CudaLayerWeights& w, const float* logits,
                           const RouteRows& rows, Routing* out);

 private:
  MoeLayerConfig config_;
  int64_t max_tokens_ = 0;
  DeviceBuffer logits_, idx_, weights_, token_ids_;
  PinnedBuffer host_token_ids_;
  TokenRouter host_;
};

}  // namespace moe

#include "engine/cuda/cuda_router.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"
#include "kernels/routing_rule.h"

namespace moe {
namespace {

// The fused kernel's limits (kernels/cuda/kernels.h), its shared memory
// included: a layer outside them (say 4096 experts in 4096 groups, which
// would need more than the 48 KB a kernel gets without opting in) routes on
// the host from the copied logits, with the same rules and answers.
bool FusedPath(const MoeLayerConfig& c) {
  return c.routing == RoutingMode::kTokenChoice && c.capacity_factor == 0.0 &&
         c.num_experts <= kernels::cuda::kMaxRouteExperts &&
         c.top_k <= kernels::cuda::kMaxRouteTopK &&
         kernels::RouteFitsSharedMemory(c.num_experts, c.n_groups);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaRouter>> CudaRouter::Create(
    const MoeLayerConfig& c, int64_t max_tokens) {
  auto r = std::unique_ptr<CudaRouter>(new CudaRouter());
  r->config_ = c;
  r->max_tokens_ = max_tokens;
  const int64_t E = c.num_experts, k = c.top_k;
  MOE_ASSIGN_OR_RETURN(r->logits_, DeviceBuffer::Allocate(max_tokens * E * 4));
  if (FusedPath(c)) {
    MOE_ASSIGN_OR_RETURN(r->idx_, DeviceBuffer::Allocate(max_tokens * k * 4));
    MOE_ASSIGN_OR_RETURN(r->weights_,
                         DeviceBuffer::Allocate(max_tokens * k * 4));
    if (c.hash_routed()) {
      MOE_ASSIGN_OR_RETURN(r->token_ids_,
                           DeviceBuffer::Allocate(max_tokens * 8));
      MOE_ASSIGN_OR_RETURN(r->host_token_ids_,
                           PinnedBuffer::Allocate(max_tokens * 8));
    }
  }
  return r;
}

absl::Status CudaRouter::Queue(LtMatmul& lt, const CudaLayerWeights& w,
                               const float* x, const DeviceRouteQuery& query,
                               DeviceStepQueue& queue, cudaStream_t stream,
                               DeviceRouteAnswer* answer) {
  const MoeLayerConfig& c = config_;
  const int64_t n = query.n;
  const absl::Span<const int64_t> token_ids = query.token_ids;
  const int64_t E = c.num_experts, k = c.top_k;
  if (!w.has_gate) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", w.layer, " was loaded without its gate"));
  }
  if (n > max_tokens_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(n, " tokens exceed the router's ", max_tokens_));
  }
  // Before anything reads the table with them (the kernel cannot refuse).
  MOE_RETURN_IF_ERROR(CheckTokenIds(c, token_ids, n));
  if ((c.router_bias && w.router_bias.empty()) ||
      (c.hash_routed() && w.tid2eid.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", w.layer, " was loaded without its router bias or tid2eid"));
  }
  auto* logits = logits_.as<float>();
  MOE_RETURN_IF_ERROR(lt.Run(n, E, c.hidden, x, w.gate.data(), logits,
                             CUDA_R_32F, CUDA_R_32F, stream));
  *answer = DeviceRouteAnswer();
  if (!FusedPath(c) || query.host_logits) {
    answer->logits = logits;
    return absl::OkStatus();
  }
  kernels::cuda::RouteArgs a;
  a.logits = logits;
  a.tokens = n;
  a.num_experts = static_cast<int32_t>(E);
  a.top_k = static_cast<int32_t>(k);
  a.score_func = c.score_func == ScoreFunc::kSigmoid
                     ? kernels::cuda::kScoreSigmoid
                 : c.score_func == ScoreFunc::kSqrtSoftplus
                     ? kernels::cuda::kScoreSqrtSoftplus
                 : c.score_func == ScoreFunc::kTopkSoftmax
                     ? kernels::cuda::kScoreTopkSoftmax
                     : kernels::cuda::kScoreSoftmax;
  a.router_bias = c.router_bias ? w.router_bias_dev.as<float>() : nullptr;
  a.expert_bias = c.use_bias ? w.expert_bias_dev.as<float>() : nullptr;
  if (c.hash_routed() && n > 0) {
    // The previous routing's wait freed the staging.
    std::memcpy(host_token_ids_.data(), token_ids.data(), n * 8);
    MOE_RETURN_IF_ERROR(
        queue.CopyFromHost(host_token_ids_.data(), token_ids_.data(), n * 8));
    a.tid2eid = w.tid2eid_dev.as<int32_t>();
    a.token_ids = token_ids_.as<int64_t>();
  }
  a.n_groups = static_cast<int32_t>(c.n_groups);
  a.topk_groups = static_cast<int32_t>(c.topk_groups);
  a.group_score = c.group_score == GroupScore::kMax
                      ? kernels::cuda::kGroupMax
                      : kernels::cuda::kGroupTop2Sum;
  a.renorm = c.route_norm;
  a.route_scale = c.route_scale;
  a.norm_min = c.norm_min;
  a.idx = idx_.as<int32_t>();
  a.weights = weights_.as<float>();
  MOE_CUDA_OK(kernels::cuda::RouteTopK(a, stream));
  answer->idx = a.idx;
  answer->weights = a.weights;
  return absl::OkStatus();
}

absl::Status CudaRouter::RouteLogits(const CudaLayerWeights& w,
                                     const float* logits, const RouteRows& rows,
                                     Routing* out) {
  RouteTables tables;
  tables.expert_bias = w.expert_bias.data();
  tables.router_bias = w.router_bias.data();
  tables.tid2eid = w.tid2eid.data();
  return host_.RouteLogits(config_, tables, logits, rows, 1, out);
}

}  // namespace moe

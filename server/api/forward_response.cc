#include "server/api/forward_response.h"

#include "absl/strings/str_cat.h"
#include "core/finite_check.h"
#include "proto/tensor_codec.h"

namespace moe {
namespace {

void FillRouting(const Routing& routing, moe::v1::Routing* r) {
  r->set_tokens(routing.tokens);
  r->set_slots(static_cast<int32_t>(routing.slots));
  r->mutable_expert_ids()->Assign(routing.expert.begin(), routing.expert.end());
  r->mutable_weights()->Assign(routing.weight.begin(), routing.weight.end());
}

void FillCriticalWorker(const WorkerStageTimes& w, moe::v1::WorkerTiming* c) {
  c->set_rank(w.rank);
  c->set_decode_us(w.decode_us);
  c->set_gather_us(w.gather_us);
  c->set_dispatch_wait_us(w.dispatch_wait_us);
  c->set_experts_us(w.experts_us);
  c->set_combine_wait_us(w.combine_wait_us);
  c->set_sum_us(w.sum_us);
  c->set_step_us(w.step_us);
}

void FillTiming(const BatchResult& res,
                std::chrono::steady_clock::time_point arrival,
                moe::v1::StageTiming* t) {
  t->set_queue_us(res.queue_us);
  t->set_route_us(res.times.route_us);
  t->set_plan_us(res.times.plan_us);
  t->set_dispatch_us(res.times.dispatch_us);
  t->set_experts_us(res.times.experts_us);
  t->set_combine_us(res.times.combine_us);
  t->set_shared_us(res.times.shared_us);
  t->set_wire_us(res.times.wire_us);
  if (res.times.critical_worker.rank >= 0) {
    FillCriticalWorker(res.times.critical_worker, t->mutable_critical_worker());
  }
  t->set_total_us(std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - arrival)
                      .count());
  t->set_batch_tokens(res.batch_tokens);
  t->set_batch_requests(res.batch_requests);
}

}  // namespace

absl::Status FillForwardResponse(ResponseParts parts, DType out_dtype,
                                 int64_t hidden, const BatchResult& result,
                                 std::chrono::steady_clock::time_point arrival,
                                 moe::v1::ForwardResponse* response) {
  const int64_t n = result.routing.tokens;
  if (const int64_t bad = FirstNonFiniteRow(result.y.data(), n, hidden);
      bad >= 0) {
    return absl::OutOfRangeError(
        absl::StrCat("output: token ", bad,
                     " is not finite (NaN or infinity) although the input "
                     "was; its hidden states overflow the computation"));
  }
  if (parts.shared_output) {
    if (const int64_t bad = FirstNonFiniteRow(result.shared.data(), n, hidden);
        bad >= 0) {
      return absl::OutOfRangeError(absl::StrCat(
          "shared_output: token ", bad,
          " is not finite (NaN or infinity) although the input was; its "
          "hidden states overflow the computation"));
    }
  }
  EncodeMatrix(result.y.data(), n, hidden, ToWireDType(out_dtype),
               response->mutable_output());
  if (parts.shared_output) {
    EncodeMatrix(result.shared.data(), n, hidden, ToWireDType(out_dtype),
                 response->mutable_shared_output());
  }
  if (parts.router_logits) {
    EncodeMatrix(result.router_logits.data(), n, parts.experts, moe::v1::F32,
                 response->mutable_router_logits());
  }
  if (parts.routing) FillRouting(result.routing, response->mutable_routing());
  if (parts.timing) FillTiming(result, arrival, response->mutable_timing());
  return absl::OkStatus();
}

}  // namespace moe

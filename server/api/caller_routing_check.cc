#include "server/api/caller_routing_check.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/tensor_codec.h"

namespace moe {
namespace {

absl::Status CheckRouting(const moe::v1::Routing& routing, int64_t layer,
                          const MoeLayerConfig& c, int64_t n) {
  if (c.routing == RoutingMode::kExpertChoice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "routing: layer ", layer,
        " is routed by expert choice (each expert picks its tokens), so a "
        "token has no k slots of its own to send; send router_logits or "
        "neither"));
  }
  if (routing.tokens() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.tokens: ", routing.tokens(), " for ", n,
                     " rows of hidden_states; expected one per row"));
  }
  if (routing.slots() != c.top_k) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.slots: wrong k: ", routing.slots(),
                     ", expected layer ", layer, "'s top_k of ", c.top_k));
  }
  const int64_t want = n * c.top_k;
  if (routing.expert_ids_size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "routing.expert_ids: ", routing.expert_ids_size(), " ids, expected ",
        want, " (tokens ", n, " x slots ", c.top_k, ")"));
  }
  if (routing.weights_size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "routing.weights: ", routing.weights_size(), " weights, expected ",
        want, " (tokens ", n, " x slots ", c.top_k, ")"));
  }
  const int64_t k = c.top_k;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t i = t * k + s;
      const int32_t e = routing.expert_ids(i);
      // Ids E..E+Z-1 are the layer's zero experts (computed on the router).
      if (e < 0 || e >= c.router_rows()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "routing.expert_ids[", i, "] (row ", t, ", slot ", s, "): ", e,
            " is outside [0, ", c.router_rows(), ")",
            c.zero_experts > 0
                ? absl::StrCat(" (", c.num_experts, " experts and ",
                               c.zero_experts, " zero experts)")
                : ""));
      }
      for (int64_t p = 0; p < s; ++p) {
        if (routing.expert_ids(t * k + p) == e) {
          return absl::InvalidArgumentError(
              absl::StrCat("routing.expert_ids[", i, "] (row ", t, ", slot ", s,
                           "): expert ", e, " repeats slot ", p,
                           "; a row's experts must be distinct"));
        }
      }
      if (!std::isfinite(routing.weights(i))) {
        return absl::InvalidArgumentError(
            absl::StrCat("routing.weights[", i, "] (row ", t, ", slot ", s,
                         "): not finite (", routing.weights(i), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WireMatrix> CheckLogits(const moe::v1::Tensor& t, int64_t layer,
                                       const MoeLayerConfig& c, int64_t n) {
  if (c.hash_routed()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "router_logits: layer ", layer,
        " is hash-routed: it chooses experts by token id (token_ids), "
        "which logits do not carry; send routing or neither"));
  }
  if (t.dtype() != moe::v1::F32 && t.dtype() != moe::v1::BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("router_logits.dtype: expected F32 or BF16, got ",
                     moe::v1::DType_Name(t.dtype())));
  }
  // One column per router row: the zero experts' follow the experts'.
  if (t.shape_size() == 2 && t.shape(1) != c.router_rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "router_logits.shape[1]: wrong width ", t.shape(1), ", expected layer ",
        layer, "'s ", c.router_rows(),
        c.zero_experts > 0 ? " router rows (experts + zero experts)"
                           : " experts",
        " ([N, experts])"));
  }
  auto m = CheckMatrix(t, "router_logits", c.router_rows(),
                       /*require_finite=*/true);
  if (!m.ok()) return m.status();
  if (m->rows != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("router_logits.shape[0]: ", m->rows, " rows for ", n,
                     " rows of hidden_states; expected one per row"));
  }
  return *m;
}

}  // namespace

absl::StatusOr<ValidCallerRouting> CheckCallerRouting(
    const moe::v1::ForwardRequest& r, int64_t layer, const MoeLayerConfig& c,
    int64_t n) {
  ValidCallerRouting v;
  if (r.has_routing() && r.has_router_logits()) {
    return absl::InvalidArgumentError(
        "routing, router_logits: send one or neither; routing already says "
        "which experts, so there is nothing left to score");
  }
  if (r.has_routing()) {
    if (absl::Status s = CheckRouting(r.routing(), layer, c, n); !s.ok()) {
      return s;
    }
    v.source = RouteSource::kRouting;
    v.expert_ids = absl::MakeConstSpan(r.routing().expert_ids().data(),
                                       r.routing().expert_ids_size());
    v.weights = absl::MakeConstSpan(r.routing().weights().data(),
                                    r.routing().weights_size());
  }
  if (r.has_router_logits()) {
    auto m = CheckLogits(r.router_logits(), layer, c, n);
    if (!m.ok()) return m.status();
    v.source = RouteSource::kLogits;
    v.logits = *m;
  }
  switch (r.shared()) {
    case moe::v1::SHARED_ADD:
      v.shared = SharedPart::kAdd;
      break;
    case moe::v1::SHARED_SEPARATE:
      v.shared = SharedPart::kSeparate;
      break;
    case moe::v1::SHARED_SKIP:
      v.shared = SharedPart::kSkip;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "shared: unknown SharedMode ", static_cast<int>(r.shared()),
          "; expected SHARED_ADD (0), SHARED_SEPARATE (1) or SHARED_SKIP (2)"));
  }
  v.return_logits = r.return_router_logits();
  return v;
}

}  // namespace moe

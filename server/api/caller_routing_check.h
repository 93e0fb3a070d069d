// Checks the caller-routing fields of a Forward request (routing,
// router_logits, return_router_logits, shared) against the layer served:
// part of ValidateForward, in a file of its own so that its one job reads
// in one place. Every message names the field, the row where there is one,
// and what was expected.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/moe_config.h"
#include "core/wire_matrix.h"
#include "engine/caller_overrides.h"
#include "moe/v1/moe.pb.h"

namespace moe {

// The request's caller routing, viewed in the message (which must outlive
// this).
struct ValidCallerRouting {
  RouteSource source = RouteSource::kGate;
  // kRouting: [N * top_k] each.
  absl::Span<const int32_t> expert_ids;
  absl::Span<const float> weights;
  // kLogits: [N, experts], f32 or bf16, finite.
  WireMatrix logits;
  bool return_logits = false;
  SharedPart shared = SharedPart::kAdd;
};

// INVALID_ARGUMENT for routing or logits that do not fit layer `layer`
// (config `c`) and its `n` rows of hidden states, or an unknown shared
// mode.
absl::StatusOr<ValidCallerRouting> CheckCallerRouting(
    const moe::v1::ForwardRequest& r, int64_t layer, const MoeLayerConfig& c,
    int64_t n);

}  // namespace moe

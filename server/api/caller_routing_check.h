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

// Holds the request's caller routing as views into the message, so the message
// must outlive it.
struct ValidCallerRouting {
  RouteSource source = RouteSource::kGate;
  // Under kRouting each holds [N * top_k] values.
  absl::Span<const int32_t> expert_ids;
  absl::Span<const float> weights;
  // Under kLogits this holds [N, experts] finite f32 or bf16 values.
  WireMatrix logits;
  bool return_logits = false;
  SharedPart shared = SharedPart::kAdd;
};

// Returns INVALID_ARGUMENT for routing or logits that do not fit layer `layer`
// (config `c`) and its `n` rows of hidden states, or an unknown shared mode.
absl::StatusOr<ValidCallerRouting> CheckCallerRouting(
    const moe::v1::ForwardRequest& r, int64_t layer, const MoeLayerConfig& c,
    int64_t n);

}  // namespace moe

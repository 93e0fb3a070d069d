// Checks a Forward request before any work: layer, tensor dtype, rank,
// hidden size, byte length, finiteness and size limits. Every message names
// the field and what was expected. Part of the MoeService RPC handler (its
// one caller): it checks the request against the model served and the
// router's limits, which proto/'s codecs do not know, and hands on a plain
// ValidForward of views into the message, so protobuf ends here.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/model_source.h"
#include "moe/v1/moe.pb.h"
#include "proto/tensor_codec.h"
#include "server/api/caller_routing_check.h"

namespace moe {

struct ForwardLimits {
  int64_t max_request_tokens = 0;
};

struct ValidForward {
  int64_t layer = 0;
  // Holds the request's hidden states, checked (finite, [N, hidden]) and viewed
  // in place, so the request must outlive this.
  WireMatrix x;
  DType output_dtype = DType::kF32;  // F32, BF16 or F16
  // Holds the request's token_ids (a view into it): one per row, checked
  // against the vocabulary for a hash-routed layer; empty when none were sent.
  absl::Span<const int64_t> token_ids;
  // Holds the routing or logits from the caller, whether to return the logits,
  // and the shared experts' part (views into the message, like x).
  ValidCallerRouting caller;
  // Holds the request's token_types (a view into it), one per row in [0, 2]
  // or empty, and the layer's vision layer when the layer has vision experts
  // and some row is not text (the request is then split by modality), else
  // -1.
  absl::Span<const int32_t> token_types;
  int64_t vision_layer = -1;
};

// token_ids: a hash-routed layer needs one id in [0, hash_vocab) per row;
// other layers accept and ignore them, but when given there must be one
// per row (a mismatch is a client bug worth reporting).
// token_types: a layer with text and vision experts (ERNIE-4.5-VL) needs
// one per row, 0 text, 1 image or 2 video; other layers accept and ignore
// them (one per row when given). A vision layer itself is not a request's
// layer. Caller routing or logits with a row that is not text are refused.
// routing, router_logits, shared: CheckCallerRouting.
// NOT_FOUND for a layer that is not an MoE layer, RESOURCE_EXHAUSTED for too
// many tokens (naming --max-request-tokens), INVALID_ARGUMENT for everything
// else.
absl::StatusOr<ValidForward> ValidateForward(const moe::v1::ForwardRequest& r,
                                             const ModelInfo& model,
                                             const ForwardLimits& limits);

}  // namespace moe

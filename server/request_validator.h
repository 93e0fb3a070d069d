// Checks a Forward request before any work: layer, tensor dtype, rank,
// hidden size, byte length, finiteness and size limits. Every message names
// the field and what was expected.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "moe/v1/moe.pb.h"
#include "proto/tensor_codec.h"

namespace moe {

struct ForwardLimits {
  int64_t max_request_tokens = 0;
};

struct ValidForward {
  int64_t layer = 0;
  // The request's hidden states, checked (finite, [N, hidden]) and viewed
  // in place: the request must outlive this.
  WireMatrix x;
  moe::v1::DType output_dtype = moe::v1::F32;
};

// NOT_FOUND for a layer that is not an MoE layer, RESOURCE_EXHAUSTED for too
// many tokens, INVALID_ARGUMENT for everything else.
absl::StatusOr<ValidForward> ValidateForward(const moe::v1::ForwardRequest& r,
                                             const ModelInfo& model,
                                             const ForwardLimits& limits);

}  // namespace moe

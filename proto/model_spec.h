// The model a router assigns to its workers, as it travels in an
// Assignment: a checkpoint path or a synthetic spec. Both directions live
// here so they cannot drift apart.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_location.h"
#include "moe/v1/worker.pb.h"

namespace moe {

// `weight_dtype`: the WeightDTypeName the workers load experts in.
moe::v1::ModelSpec ModelSpecFor(const ModelLocation& location,
                                absl::string_view weight_dtype);

// INVALID_ARGUMENT for a malformed synthetic config.
absl::StatusOr<ModelLocation> ModelLocationOf(const moe::v1::ModelSpec& spec);

}  // namespace moe

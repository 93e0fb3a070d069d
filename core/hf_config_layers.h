// Which decoder layers of a Hugging Face model are MoE: one function per
// named rule of MoeDescription::layers, each reading its family's keys.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/hf_config_family.h"
#include "core/hf_config_reader.h"
#include "core/model_source.h"

namespace moe {

// Appends the MoE layer ids of `rule` to info->moe_layers (ascending),
// refusing a key of the wrong type or value by name.
absl::Status ReadMoeLayers(MoeLayerRule rule, const ConfigReader& r,
                           ModelInfo* info);

// The MoE layers from the first of `keys` present as a per-layer list of
// "sparse" / "dense" or 1 / 0 (FamilyEntry::moe_layer_lists), or nullopt
// when none is.
absl::StatusOr<std::optional<std::vector<int64_t>>> ListedMoeLayers(
    const ConfigReader& r, const std::vector<const char*>& keys,
    int64_t num_layers);

}  // namespace moe

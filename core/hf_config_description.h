// The one interpreter of the family descriptions (hf_config_family.h): what
// a family's config keys give for its MoE layer.
#pragma once

#include "absl/status/status.h"
#include "core/hf_config_family.h"
#include "core/hf_config_reader.h"
#include "core/model_source.h"

namespace moe {

// Reads `d`'s keys from `r` into info->layer and info->moe_layers (and
// layer_overrides where its `finish` rule sets them), in MoeDescription's
// order; info->family, num_layers and the layer's hidden, top_k and latent
// are read before. A bad key is refused by name.
absl::Status ReadMoeDescription(const MoeDescription& d, const ConfigReader& r,
                                ModelInfo* info);

}  // namespace moe

#include "proto/model_spec.h"

#include <string>

#include "core/moe_config.h"
#include "core/status_macros.h"

namespace moe {

moe::v1::ModelSpec ModelSpecFor(const ModelLocation& location,
                                absl::string_view weight_dtype) {
  moe::v1::ModelSpec spec;
  if (location.is_checkpoint()) {
    spec.set_checkpoint_dir(location.checkpoint_dir);
  } else {
    spec.set_synthetic_config_json(
        MoeLayerConfigToJson(location.synthetic.layer));
    spec.set_synthetic_layers(location.synthetic.num_layers);
    spec.set_synthetic_seed(location.synthetic.seed);
  }
  spec.set_weight_dtype(std::string(weight_dtype));
  return spec;
}

absl::StatusOr<ModelLocation> ModelLocationOf(const moe::v1::ModelSpec& spec) {
  ModelLocation loc;
  if (!spec.checkpoint_dir().empty()) {
    loc.checkpoint_dir = spec.checkpoint_dir();
    return loc;
  }
  MOE_ASSIGN_OR_RETURN(loc.synthetic.layer,
                       ParseMoeLayerConfigJson(spec.synthetic_config_json()));
  loc.synthetic.num_layers = spec.synthetic_layers();
  loc.synthetic.seed = spec.synthetic_seed();
  return loc;
}

}  // namespace moe

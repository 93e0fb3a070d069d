#include "core/model_location.h"

#include "core/hf_checkpoint.h"
#include "core/status_macros.h"

namespace moe {

absl::StatusOr<std::unique_ptr<ModelSource>> OpenModel(
    const ModelLocation& location) {
  if (location.is_checkpoint()) {
    MOE_ASSIGN_OR_RETURN(auto ckpt,
                         HfCheckpoint::Open(location.checkpoint_dir));
    return std::unique_ptr<ModelSource>(std::move(ckpt));
  }
  return MakeSyntheticModel(location.synthetic);
}

}  // namespace moe

#include "core/model_location.h"

#include "core/hf_checkpoint.h"

namespace moe {

absl::StatusOr<std::unique_ptr<ModelSource>> OpenModel(
    const ModelLocation& location) {
  if (location.is_checkpoint()) {
    auto ckpt = HfCheckpoint::Open(location.checkpoint_dir);
    if (!ckpt.ok()) return ckpt.status();
    return std::unique_ptr<ModelSource>(std::move(*ckpt));
  }
  return MakeSyntheticModel(location.synthetic);
}

}  // namespace moe

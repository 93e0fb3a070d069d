// Where a process finds the model: a Hugging Face checkpoint directory (the
// same path on every process, e.g. a shared volume) or a synthetic spec.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "core/synthetic_model.h"

namespace moe {

struct ModelLocation {
  std::string checkpoint_dir;  // set: a checkpoint
  SyntheticSpec synthetic;     // otherwise: the synthetic model
  bool is_checkpoint() const { return !checkpoint_dir.empty(); }
};

absl::StatusOr<std::unique_ptr<ModelSource>> OpenModel(
    const ModelLocation& location);

}  // namespace moe

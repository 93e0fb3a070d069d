#include "proto/model_spec.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/family_file.h"
#include "core/hf_config_family.h"
#include "core/moe_config.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

// Adds a family the router read from a file, unless this process has it
// already (a later assignment carries it again); one of the same
// model_type but another description is refused. The first assignment
// adds it before any checkpoint is opened here.
absl::Status AddRouterFamily(const std::string& doc) {
  const nlohmann::json j = nlohmann::json::parse(doc, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model_type") ||
      !j["model_type"].is_string()) {
    return absl::InvalidArgumentError(
        "assignment: a family document without a model_type");
  }
  const std::string model_type = j["model_type"].get<std::string>();
  absl::StatusOr<std::string> known = PrintFamilyJson(model_type);
  if (known.ok()) {
    if (*known == doc) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: the router's family '", model_type,
        "' differs from the one this worker knows by that model_type"));
  }
  return AddFamilyJson(doc,
                       absl::StrCat("(the router's family '", model_type, "')"))
      .status();
}

}  // namespace

moe::v1::ModelSpec ModelSpecFor(const ModelLocation& location,
                                absl::string_view weight_dtype) {
  moe::v1::ModelSpec spec;
  if (location.is_checkpoint()) {
    spec.set_checkpoint_dir(location.checkpoint_dir);
    for (const FamilyEntry& e : FamilyTable()) {
      if (e.source_file == nullptr) continue;
      absl::StatusOr<std::string> doc = PrintFamilyJson(e.family);
      if (doc.ok()) spec.add_family_json(*std::move(doc));
    }
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
    for (const std::string& doc : spec.family_json()) {
      MOE_RETURN_IF_ERROR(AddRouterFamily(doc));
    }
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

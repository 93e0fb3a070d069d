// Families as JSON documents: the form `moe-router --print-family` writes a
// built-in family in and `moe-router --family-file` reads a user's family
// from, so that a release the table does not know yet can be served without
// a rebuild. A file family goes through the same interpreter as the built-in
// ones (hf_config_description.cc); the file gives its description and its
// tensor names, or names a built-in family (`like`) whose ones it takes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/hf_config.h"

namespace moe {

// The JSON document of `family`, with its whole description and name
// tables spelled out (a family described `like` another has that one's
// written in).
absl::StatusOr<std::string> PrintFamilyJson(HfFamily family);
// The same for the family `name` names: its model_type, or one of its
// architectures where families share a model_type; NOT_FOUND naming the
// known families, INVALID_ARGUMENT listing those a shared name has.
absl::StatusOr<std::string> PrintFamilyJson(absl::string_view name);

// Reads a family document (`label` names it in errors), checks every field
// (an unknown field, a wrong type or an unknown enum value is refused,
// naming the field's path such as `moe.shared.rule`) and adds the family to
// the table. Its model_type must not be a known one. Call before any
// checkpoint is opened: the table only grows while one thread starts up.
absl::StatusOr<HfFamily> AddFamilyJson(absl::string_view text,
                                       absl::string_view label);

// AddFamilyJson of the file at `path`.
absl::StatusOr<HfFamily> AddFamilyFile(const std::string& path);

// The family file a family was read from; empty for a built-in family.
std::string FamilySourceFile(HfFamily family);

}  // namespace moe

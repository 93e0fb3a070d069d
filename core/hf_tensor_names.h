// A family's tensor-name tables in plain form, for the family files
// (family_file.h): written out by --print-family and added from a user's
// file. The tables themselves and their interpreter are hf_tensor_names.cc.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/hf_config.h"
#include "core/model_source.h"

namespace moe {

// One role's tensor: its name template ({p} the layer prefix, {e} the
// expert) and the name of its layout kind (HfLayoutNames()).
struct HfRoleName {
  WeightRole role;
  std::string name;
  std::string layout = "own";
};
// Per-expert names, and the names of transformers v5's packed form where
// the family has one (empty otherwise).
struct HfNameTables {
  std::vector<HfRoleName> per_expert;
  std::vector<HfRoleName> packed;
};

// The tables `family` reads its tensors by (its base family's).
HfNameTables HfFamilyNames(HfFamily family);
// Every layout kind's name, "own" first.
std::vector<std::string> HfLayoutNames();
// Gives `family`, which has none yet, the tables `names`; INVALID_ARGUMENT
// naming an unknown layout kind or a role listed twice. Only while one
// thread starts up, like AddFamilyEntry.
absl::Status AddHfFamilyNames(HfFamily family, const HfNameTables& names);

}  // namespace moe

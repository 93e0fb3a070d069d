// Family documents: every built-in family printed and read back as a file
// family gives the same ModelInfo and tensor names for every golden case it
// expresses; a bad document is refused naming the field. Its own binary:
// the families it adds stay in this process.
#include "core/family_file.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/hf_config.h"
#include "core/hf_config_family.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"

namespace moe {
namespace {

using json = nlohmann::json;

// The file family that reads `family` back from its printed document,
// added once per process under the model_type "file_<n>_<model_type>".
HfFamily FileTwin(HfFamily family) {
  static auto* twins = new std::map<HfFamily, HfFamily>;
  auto it = twins->find(family);
  if (it != twins->end()) return it->second;
  absl::StatusOr<std::string> text = PrintFamilyJson(family);
  EXPECT_TRUE(text.ok()) << text.status();
  json doc = json::parse(*text);
  // Two families may share a model_type (bailing_moe): the twin's names
  // its family too.
  doc["model_type"] = absl::StrCat("file_", static_cast<int>(family), "_",
                                   HfFamilyName(family));
  absl::StatusOr<HfFamily> twin =
      AddFamilyJson(doc.dump(), absl::StrCat(HfFamilyName(family), ".json"));
  EXPECT_TRUE(twin.ok()) << twin.status();
  return (*twins)[family] = twin.value_or(family);
}

// The same document, less what names it.
json Body(HfFamily family) {
  json doc = json::parse(PrintFamilyJson(family).value());
  doc.erase("model_type");
  doc.erase("like");
  return doc;
}

TEST(FamilyFile, EveryBuiltInRoundTripsToTheSameModelInfoAndNames) {
  int compared = 0;
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    for (HfFamily family : testing::FamiliesFor(c->config)) {
      if (static_cast<int>(family) >= 1000) continue;  // a twin itself
      SCOPED_TRACE(absl::StrCat(c->name, " as ", HfFamilyName(family)));
      const std::string text = testing::HfConfigJson(c->config, family, 4);
      auto built_in = ParseHfConfig(text, "config.json");
      ASSERT_TRUE(built_in.ok()) << built_in.status();
      const HfFamily twin = FileTwin(family);
      json doc = json::parse(text);
      doc["model_type"] = HfFamilyName(twin);
      auto from_file = ParseHfConfig(doc.dump(), "config.json");
      ASSERT_TRUE(from_file.ok()) << from_file.status();
      const ModelInfo& a = built_in->info;
      const ModelInfo& b = from_file->info;
      EXPECT_EQ(b.family, HfFamilyName(twin));
      EXPECT_EQ(a.num_layers, b.num_layers);
      EXPECT_EQ(a.moe_layers, b.moe_layers);
      EXPECT_EQ(a.layer, b.layer) << MoeLayerConfigToJson(a.layer) << "\n"
                                  << MoeLayerConfigToJson(b.layer);
      EXPECT_EQ(a.layer_overrides, b.layer_overrides);
      EXPECT_EQ(built_in->quant_method, from_file->quant_method);
      for (int64_t layer : a.moe_layers) {
        for (int role = 0;
             std::string(WeightRoleName(static_cast<WeightRole>(role))) != "?";
             ++role) {
          for (HfExpertLayout layout :
               {HfExpertLayout::kPerExpert, HfExpertLayout::kPacked}) {
            const auto r = static_cast<WeightRole>(role);
            const HfTensorLocation x =
                HfLocate(family, a.LayerConfig(layer), layer, r, 3, layout);
            const HfTensorLocation y =
                HfLocate(twin, b.LayerConfig(layer), layer, r, 3, layout);
            EXPECT_EQ(x.name, y.name) << WeightRoleName(r);
            EXPECT_EQ(x.fused_shape, y.fused_shape) << WeightRoleName(r);
            EXPECT_EQ(x.col0, y.col0) << WeightRoleName(r);
            EXPECT_EQ(x.col_step, y.col_step) << WeightRoleName(r);
          }
        }
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
}

TEST(FamilyFile, EveryBuiltInPrintsAndItsTwinPrintsTheSame) {
  for (HfFamily family : std::vector<HfFamily>(AllHfFamilies())) {
    if (static_cast<int>(family) >= 1000) continue;
    SCOPED_TRACE(HfFamilyName(family));
    EXPECT_EQ(Body(family), Body(FileTwin(family)));
  }
}

TEST(FamilyFile, PrintingAnUnknownFamilyListsTheKnownOnes) {
  auto text = PrintFamilyJson("no_such_moe");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(text.status().message().find("mixtral"), std::string::npos);
}

// A family that is no built-in: its own keys and tensor names.
json AcmeFamily() {
  return json::parse(R"({
    "model_type": "acme_moe",
    "architectures": ["AcmeMoeForCausalLM"],
    "layer_prefix": "model.blocks.{L}.",
    "top_k_keys": ["experts_per_token"],
    "moe": {
      "experts": {"key": "n_experts", "fallback": null},
      "inter": {"key": "expert_width", "fallback": null},
      "shared": {"rule": "width_key", "key": {"key": "shared_width",
                 "fallback": 0}, "gated": true},
      "route_norm": {"key": "renormalize", "fallback": false}
    },
    "names": {"per_expert": [
      {"role": "gate", "name": "{p}moe.router.weight"},
      {"role": "w1", "name": "{p}moe.ffn.{e}.wi_gate.weight"},
      {"role": "w3", "name": "{p}moe.ffn.{e}.wi_up.weight"},
      {"role": "w2", "name": "{p}moe.ffn.{e}.wo.weight"},
      {"role": "shared.w1", "name": "{p}moe.common.wi_gate.weight"},
      {"role": "shared.w3", "name": "{p}moe.common.wi_up.weight"},
      {"role": "shared.w2", "name": "{p}moe.common.wo.weight"},
      {"role": "shared.gate", "name": "{p}moe.common.gate.weight"}
    ]}
  })");
}

TEST(FamilyFile, ANewFamilyReadsItsOwnKeysAndNames) {
  auto family = AddFamilyJson(AcmeFamily().dump(), "acme.json");
  ASSERT_TRUE(family.ok()) << family.status();
  EXPECT_EQ(FamilySourceFile(*family), "acme.json");
  auto spec = ParseHfConfig(R"({"model_type": "acme_moe",
      "architectures": ["AcmeMoeForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 2, "n_experts": 8, "expert_width": 32,
      "experts_per_token": 2, "shared_width": 48, "renormalize": true})",
                            "config.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const MoeLayerConfig& c = spec->info.layer;
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.inter, 32);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.shared_inter, 48);
  EXPECT_TRUE(c.shared_gate);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(spec->info.moe_layers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(HfTensorName(*family, 1, WeightRole::kW2, 5),
            "model.blocks.1.moe.ffn.5.wo.weight");
  // Its keys are the file's: a config without one is refused naming the
  // key and the file.
  auto missing = ParseHfConfig(R"({"model_type": "acme_moe",
      "hidden_size": 64, "num_hidden_layers": 2, "n_experts": 8,
      "experts_per_token": 2})",
                               "config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'expert_width'"),
            std::string::npos)
      << missing.status();
  EXPECT_NE(missing.status().message().find("acme.json"), std::string::npos)
      << missing.status();
  // Its model_type is taken now.
  auto again = AddFamilyJson(AcmeFamily().dump(), "acme2.json");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("'model_type'"), std::string::npos);
}

TEST(FamilyFile, LikeStartsFromAKnownFamily) {
  json doc = json::parse(R"({"model_type": "mixtral_clone",
      "architectures": ["MixtralCloneForCausalLM"], "like": "mixtral",
      "moe": {"route_norm": {"key": "normalize_weights", "fallback": true}}})");
  auto family = AddFamilyJson(doc.dump(), "clone.json");
  ASSERT_TRUE(family.ok()) << family.status();
  EXPECT_EQ(HfTensorName(*family, 0, WeightRole::kW1, 2),
            HfTensorName(HfFamily::kMixtral, 0, WeightRole::kW1, 2));
  auto spec = ParseHfConfig(R"({"model_type": "mixtral_clone",
      "hidden_size": 64, "num_hidden_layers": 1, "num_local_experts": 8,
      "intermediate_size": 32, "num_experts_per_tok": 2,
      "normalize_weights": false})",
                            "config.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->info.layer.route_norm);
  EXPECT_EQ(spec->info.layer.num_experts, 8);
}

TEST(FamilyFile, BadDocumentsAreRefusedNamingTheField) {
  struct Bad {
    const char* what;
    std::function<void(json&)> change;
    const char* field;
  };
  const Bad cases[] = {
      {"unknown top-level field", [](json& d) { d["experts"] = 8; },
       "'experts'"},
      {"unknown nested field",
       [](json& d) { d["moe"]["experts"]["kee"] = "x"; }, "'moe.experts.kee'"},
      {"wrong type", [](json& d) { d["moe"]["route_norm"]["fallback"] = 1; },
       "'moe.route_norm.fallback'"},
      {"unknown enum value",
       [](json& d) { d["moe"]["shared"]["rule"] = "sometimes"; },
       "'moe.shared.rule'"},
      {"unknown score", [](json& d) { d["moe"]["score"] = "softermax"; },
       "'moe.score'"},
      {"unknown role",
       [](json& d) { d["names"]["per_expert"][1]["role"] = "w4"; },
       "'names.per_expert[1].role'"},
      {"unknown layout",
       [](json& d) { d["names"]["per_expert"][1]["layout"] = "diagonal"; },
       "'names.per_expert[1].layout'"},
      {"template without the prefix",
       [](json& d) { d["names"]["per_expert"][0]["name"] = "router.weight"; },
       "'names.per_expert[0].name'"},
      {"a needed role without a name",
       [](json& d) { d["names"]["per_expert"].erase(3); },
       "'names.per_expert'"},
      {"no architectures", [](json& d) { d["architectures"] = json::array(); },
       "'architectures'"},
      {"architectures of the wrong type",
       [](json& d) { d["architectures"] = "AcmeMoeForCausalLM"; },
       "'architectures'"},
      {"no expert count key", [](json& d) { d["moe"].erase("experts"); },
       "'moe.experts'"},
      {"an unknown like", [](json& d) { d["like"] = "mixtrel"; }, "'like'"},
      {"a built-in model_type", [](json& d) { d["model_type"] = "mixtral"; },
       "'model_type'"},
      {"a prefix without {L}",
       [](json& d) { d["layer_prefix"] = "model.blocks."; }, "'layer_prefix'"},
      {"an unknown rule", [](json& d) { d["moe"]["finish"] = "magic"; },
       "'moe.finish'"},
  };
  int n = 0;
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    json doc = AcmeFamily();
    doc["model_type"] = absl::StrCat("bad_moe_", n++);
    b.change(doc);
    const size_t before = FamilyTable().size();
    auto family = AddFamilyJson(doc.dump(), "bad.json");
    ASSERT_FALSE(family.ok());
    EXPECT_EQ(family.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(family.status().message().find(b.field), std::string::npos)
        << family.status();
    EXPECT_NE(family.status().message().find("bad.json"), std::string::npos)
        << family.status();
    EXPECT_EQ(FamilyTable().size(), before) << "a refused file added a family";
  }
  EXPECT_FALSE(AddFamilyJson("[1, 2]", "list.json").ok());
  EXPECT_FALSE(AddFamilyJson("{", "cut.json").ok());
  EXPECT_EQ(AddFamilyFile("/nonexistent/family.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace moe

#include "core/moe_config.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(MoeConfig, ParsesGoldenStyleJson) {
  auto c = ParseMoeLayerConfigJson(
      R"({"hidden": 64, "inter": 32, "experts": 16, "top_k": 4,
          "score_func": "sigmoid", "route_norm": true, "route_scale": 2.5,
          "n_groups": 4, "topk_groups": 2, "group_score": "top2_sum",
          "use_bias": true, "shared_inter": 64, "shared_gate": false,
          "score_before_experts": false, "capacity_factor": 0.0,
          "routing": "token_choice"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->score_func, ScoreFunc::kSigmoid);
  EXPECT_EQ(c->route_scale, 2.5f);
  EXPECT_EQ(c->n_groups, 4);
  auto again = ParseMoeLayerConfigJson(MoeLayerConfigToJson(*c));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *c);
}

TEST(MoeConfig, ValidationNamesTheKey) {
  auto bad = [](const char* json, const char* key) {
    auto c = ParseMoeLayerConfigJson(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status();
  };
  bad(R"({"hidden": 0, "inter": 4, "experts": 4, "top_k": 1})", "'hidden'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 5})", "'top_k'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 6, "top_k": 1, "n_groups": 4, "topk_groups": 1})",
      "'n_groups'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 8, "top_k": 4, "n_groups": 4, "topk_groups": 1})",
      "'topk_groups'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 1, "score_func": "relu"})",
      "'score_func'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 1, "capacity_factor": -1})",
      "'capacity_factor'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 1, "shared_gate": true})",
      "'shared_gate'");
  bad(R"({"hidden": "8"})", "'hidden'");
}

TEST(MoeConfig, Capacities) {
  MoeLayerConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  c.capacity_factor = 0.75;
  EXPECT_EQ(TokenChoiceCapacity(c, 40), 15);  // ceil(0.75*40*2/4)
  c.capacity_factor = 1.0;
  EXPECT_EQ(ExpertChoiceCapacity(c, 24), 6);  // floor(1*24/4)
  EXPECT_EQ(ExpertChoiceCapacity(c, 1), 1);   // at least 1
  EXPECT_EQ(ExpertChoiceCapacity(c, 0), 0);
  c.capacity_factor = 0.0;
  EXPECT_EQ(ExpertChoiceCapacity(c, 10), 5);  // floor(10*2/4)
  c.capacity_factor = 100.0;
  EXPECT_EQ(ExpertChoiceCapacity(c, 10), 10);  // at most N
}

}  // namespace
}  // namespace moe

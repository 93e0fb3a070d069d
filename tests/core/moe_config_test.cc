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

TEST(MoeConfig, Options2026RoundTripAndStayOutWhenDefault) {
  auto c = ParseMoeLayerConfigJson(
      R"({"hidden": 64, "inter": 32, "experts": 8, "top_k": 4,
          "score_func": "topk_softmax", "route_norm": false,
          "router_bias": true, "expert_bias": true, "act": "gptoss",
          "act_alpha": 1.702, "act_limit": 7.0, "norm_min": 0.0,
          "hash_vocab": 0})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->score_func, ScoreFunc::kTopkSoftmax);
  EXPECT_TRUE(c->router_bias);
  EXPECT_TRUE(c->expert_bias);
  EXPECT_EQ(c->act, Activation::kGptOss);
  EXPECT_FLOAT_EQ(c->act_alpha, 1.702f);
  const std::string json = MoeLayerConfigToJson(*c);
  EXPECT_NE(json.find("\"act\":\"gptoss\""), std::string::npos) << json;
  auto back = ParseMoeLayerConfigJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *c);

  auto v4 = ParseMoeLayerConfigJson(
      R"({"hidden": 64, "inter": 32, "experts": 32, "top_k": 6,
          "score_func": "sqrtsoftplus", "use_bias": true, "act": "silu_clamp",
          "act_limit": 10.0, "hash_vocab": 64, "norm_min": 0.45})");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->score_func, ScoreFunc::kSqrtSoftplus);
  EXPECT_EQ(v4->act, Activation::kSiluClamp);
  EXPECT_EQ(v4->hash_vocab, 64);
  EXPECT_TRUE(v4->hash_routed());
  EXPECT_FLOAT_EQ(v4->norm_min, 0.45f);

  MoeLayerConfig plain;
  plain.hidden = 8;
  plain.inter = 4;
  plain.num_experts = 4;
  plain.top_k = 2;
  EXPECT_FALSE(plain.has_2026_options());
  EXPECT_EQ(MoeLayerConfigToJson(plain).find("\"act\""), std::string::npos);
}

TEST(MoeConfig, Options2026RefusedCombinations) {
  auto bad = [](const std::string& text, const std::string& key) {
    auto c = ParseMoeLayerConfigJson(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos)
        << c.status();
  };
  const std::string base =
      R"("hidden": 8, "inter": 4, "experts": 8, "top_k": 2, )";
  bad("{" + base + R"("act": "gelu"})", "'act'");
  bad("{" + base + R"("act_limit": 0})", "'act_limit'");
  bad("{" + base + R"("norm_min": -1})", "'norm_min'");
  bad("{" + base + R"("hash_vocab": -1})", "'hash_vocab'");
  bad("{" + base + R"("score_func": "topk_softmax", "use_bias": true})",
      "'score_func'");
  bad("{" + base +
          R"("score_func": "topk_softmax", "n_groups": 2, "topk_groups": 1})",
      "'score_func'");
  bad("{" + base + R"("hash_vocab": 16, "routing": "expert_choice"})",
      "'hash_vocab'");
  bad("{" + base + R"("hash_vocab": 16, "score_func": "topk_softmax"})",
      "'hash_vocab'");
  // ERNIE 4.5: the correction bias with softmax scores is allowed.
  EXPECT_TRUE(ParseMoeLayerConfigJson(
                  "{" + base + R"("score_func": "softmax", "use_bias": true})")
                  .ok());
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

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

TEST(MoeConfig, Options2026dRoundTripAndStandAlone) {
  // The golden step35_like case's keys: the 2026d keys with a 2026 act.
  auto c = ParseMoeLayerConfigJson(
      R"({"hidden": 64, "inter": 32, "experts": 32, "top_k": 8,
          "score_func": "sigmoid", "use_bias": true, "shared_inter": 32,
          "act": "swiglustep", "act_limit": 7.0, "shared_act": "swiglustep",
          "shared_act_limit": 16.0, "jitter_eps": 0.0, "zero_experts": 0,
          "router_softcap": 0.0, "output_scale": 1.0, "output_bias": false})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->act, Activation::kSwigluStep);
  EXPECT_EQ(c->shared_activation(), Activation::kSwigluStep);
  EXPECT_FLOAT_EQ(c->shared_limit(), 16.0f);
  EXPECT_FLOAT_EQ(c->act_limit, 7.0f);
  auto back = ParseMoeLayerConfigJson(MoeLayerConfigToJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *c);

  // Without shared_act the shared expert keeps the routed activation.
  auto plain_shared = ParseMoeLayerConfigJson(
      R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 2,
          "shared_inter": 4, "act": "gelu_erf"})");
  ASSERT_TRUE(plain_shared.ok()) << plain_shared.status();
  EXPECT_EQ(plain_shared->shared_activation(), Activation::kGeluErf);
  EXPECT_FALSE(plain_shared->has_2026d_options());

  // PhiMoE and LongCat: 2026d keys listed without the 2026 ones.
  auto phi = ParseMoeLayerConfigJson(
      R"({"hidden": 8, "inter": 4, "experts": 16, "top_k": 2,
          "score_func": "sparsemixer", "route_norm": false,
          "jitter_eps": 0.01})");
  ASSERT_TRUE(phi.ok()) << phi.status();
  EXPECT_EQ(phi->score_func, ScoreFunc::kSparsemixer);
  const std::string phi_json = MoeLayerConfigToJson(*phi);
  EXPECT_NE(phi_json.find("\"jitter_eps\""), std::string::npos) << phi_json;
  EXPECT_EQ(phi_json.find("\"act\""), std::string::npos) << phi_json;
  auto longcat = ParseMoeLayerConfigJson(
      R"({"hidden": 8, "inter": 4, "experts": 4, "top_k": 6,
          "zero_experts": 2, "use_bias": true, "route_norm": false,
          "route_scale": 6.0})");
  ASSERT_TRUE(longcat.ok()) << longcat.status();
  EXPECT_EQ(longcat->router_rows(), 6);
}

TEST(MoeConfig, Options2026dRefusedCombinations) {
  auto bad = [](const std::string& text, const std::string& key) {
    auto c = ParseMoeLayerConfigJson(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos)
        << c.status();
  };
  const std::string base =
      R"("hidden": 8, "inter": 4, "experts": 8, "top_k": 2, )";
  bad("{" + base + R"("score_func": "sparsemixer"})", "'route_norm'");
  bad(R"({"hidden": 8, "inter": 4, "experts": 8, "top_k": 3,
          "score_func": "sparsemixer", "route_norm": false})",
      "'top_k'");
  bad("{" + base + R"("jitter_eps": 0.01})", "'jitter_eps'");
  bad("{" + base + R"("zero_experts": -1})", "'zero_experts'");
  bad("{" + base + R"("zero_experts": 2, "routing": "expert_choice"})",
      "'zero_experts'");
  bad("{" + base + R"("zero_experts": 2, "latent": 4})", "'zero_experts'");
  bad("{" + base + R"("router_softcap": -1})", "'router_softcap'");
  bad("{" + base + R"("shared_act": "silu"})", "'shared_act'");
  bad("{" + base + R"("shared_inter": 4, "shared_act": "gelu"})",
      "'shared_act'");
  bad("{" + base + R"("shared_inter": 4, "shared_act": "swiglustep"})",
      "'shared_act_limit'");
  bad("{" + base + R"("act": "swiglustep", "act_limit": 0})", "'act_limit'");
  // top_k may exceed E only when zero experts make up the rest.
  bad(R"({"hidden": 8, "inter": 4, "experts": 2, "top_k": 3})", "'top_k'");
  EXPECT_TRUE(ParseMoeLayerConfigJson(
                  R"({"hidden": 8, "inter": 4, "experts": 2, "top_k": 3,
                      "zero_experts": 1})")
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

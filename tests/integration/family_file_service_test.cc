// Family files as a user starts the service with them: a family that is not
// built in, written here from a golden case with its own config keys and
// tensor names, served by a router with --family-file and 2 workers; a
// built-in family printed by --print-family and served again under another
// model_type from that document; bad files and a template that finds no
// tensor refused at start naming the field.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/moe_config.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/caller_routing.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Acme-MoE, a made-up release: softmax router, renorm, a sigmoid-gated
// shared expert, every layer MoE, its own key and tensor names.
constexpr char kAcmeFamily[] = R"({
  "comment": "Acme-MoE: a release the service has no built-in entry for",
  "model_type": "acme_moe",
  "architectures": ["AcmeMoeForCausalLM"],
  "layer_prefix": "model.blocks.{L}.",
  "top_k_keys": ["experts_per_token"],
  "moe": {
    "experts": {"key": "n_experts", "fallback": null},
    "inter": {"key": "expert_width", "fallback": null},
    "shared": {"rule": "width_key",
               "key": {"key": "shared_width", "fallback": 0},
               "gated": true},
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
})";

// Layer L of an Acme-MoE checkpoint holds layers[L] (gated softmax cases
// with a gated shared expert, of one hidden width and expert count); a
// config value that differs between the layers is written as a per-layer
// list. Also attention tensors the service must ignore.
void WriteAcmeCheckpoint(const std::vector<const testing::GoldenCase*>& layers,
                         const std::string& dir) {
  const MoeLayerConfig& k = layers.front()->config;
  const int64_t E = k.num_experts, H = k.hidden;
  const int64_t n = static_cast<int64_t>(layers.size());
  auto value = [&](auto of) {
    json list = json::array();
    for (const testing::GoldenCase* c : layers) list.push_back(of(c->config));
    for (const json& v : list) {
      if (v != list[0]) return list;
    }
    return list[0];
  };
  json config = {
      {"model_type", "acme_moe"},
      {"architectures", {"AcmeMoeForCausalLM"}},
      {"hidden_size", H},
      {"num_hidden_layers", n},
      {"n_experts", E},
      {"expert_width", value([](const MoeLayerConfig& c) { return c.inter; })},
      {"experts_per_token",
       value([](const MoeLayerConfig& c) { return c.top_k; })},
      {"shared_width",
       value([](const MoeLayerConfig& c) { return c.shared_inter; })},
      {"renormalize", k.route_norm},
      {"vocab_size", 32}};
  fs::create_directories(dir);
  WriteText(dir + "/config.json", config.dump(2));
  SafetensorsWriter w;
  for (int64_t layer = 0; layer < n; ++layer) {
    const testing::GoldenCase& c = *layers[layer];
    const int64_t I = c.config.inter, S = c.config.shared_inter;
    const std::string p = absl::StrCat("model.blocks.", layer, ".");
    w.AddF32(p + "moe.router.weight", {E, H}, c.gate);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = absl::StrCat(p, "moe.ffn.", e, ".");
      auto slice = [&](const std::vector<float>& v, int64_t n) {
        return std::vector<float>(v.begin() + e * n, v.begin() + (e + 1) * n);
      };
      w.AddF32(x + "wi_gate.weight", {I, H}, slice(c.w1, I * H));
      w.AddF32(x + "wi_up.weight", {I, H}, slice(c.w3, I * H));
      w.AddF32(x + "wo.weight", {H, I}, slice(c.w2, H * I));
    }
    w.AddF32(p + "moe.common.wi_gate.weight", {S, H}, c.sw1);
    w.AddF32(p + "moe.common.wi_up.weight", {S, H}, c.sw3);
    w.AddF32(p + "moe.common.wo.weight", {H, S}, c.sw2);
    w.AddF32(p + "moe.common.gate.weight", {1, H}, c.sgate);
    w.AddF32(p + "attn.qkv.weight", {3 * H, H},
             std::vector<float>(3 * H * H, 0.01f));
  }
  w.AddF32("model.embed.weight", {32, H}, std::vector<float>(32 * H, 0.5f));
  ASSERT_TRUE(w.WriteFile(dir + "/model.safetensors").ok());
}

// `c` as an Acme-MoE checkpoint whose layer 1 is the case and layer 0 holds
// the same weights (it is not the one compared).
void WriteAcmeCheckpoint(const testing::GoldenCase& c, const std::string& dir) {
  WriteAcmeCheckpoint({&c, &c}, dir);
}

// Serves `dir` by a router with `router_args` and 2 workers, and checks
// layer 1 against `c` bit for bit in routing and within fp32 in y.
void ExpectServed(const testing::GoldenCase& c, const std::string& dir,
                  const std::vector<std::string>& router_args,
                  const std::string& family) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.router_args = router_args;
  co.workers = 2;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->family(), family);
  EXPECT_EQ(info->experts(), c.config.num_experts);
  ForwardOptions fo;
  fo.routing = true;
  auto r =
      cluster.client().Forward(1, c.x.data(), c.tokens, c.config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(r->y, c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, r->expert_ids,
                                        r->weights, c.tokens, c.config.top_k,
                                        r->slots));
}

testing::GoldenCase Case(const std::string& name) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                   ".safetensors");
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

TEST(FamilyFileService, ANewFamilyFromAFileIsServedByRouterAndTwoWorkers) {
  const testing::GoldenCase c = Case("qwen2_moe_like");
  ASSERT_TRUE(c.config.shared_gate && c.config.gated);
  const std::string dir = testing::MakeTempDir("acme_");
  WriteAcmeCheckpoint(c, dir + "/model");
  WriteText(dir + "/acme.json", kAcmeFamily);
  ExpectServed(c, dir + "/model", {"--family-file=" + dir + "/acme.json"},
               "acme_moe");
  // Without the file the family is unknown, and the router refuses it.
  testing::CommandResult r =
      testing::RunCommand({testing::RouterBinary(), "--model=" + dir + "/model",
                           "--listen=127.0.0.1:0", "--num-workers=0"},
                          std::chrono::seconds(30));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("'acme_moe'"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// A file family whose config gives the expert width, top_k and shared
// width per layer (layer_lists): layer 0 routes 3 of 8 experts 24 wide
// with a 40-wide shared expert, layer 1 is qwen2_moe_like (its own k and
// widths). Router + 2 workers, direct steps and the all-to-all, answer each
// layer by its own config; the model info lists layer 0's as an override,
// and each layer's expert stats count its own k slots per token.
TEST(FamilyFileService, LayersOfTheirOwnTopKAndWidthsAreServedByTheirOwn) {
  const testing::GoldenCase c1 = Case("qwen2_moe_like");
  MoeLayerConfig k0 = c1.config;
  k0.top_k = c1.config.top_k + 1;
  k0.inter = c1.config.inter + 13;  // odd widths, padded by the kernels
  k0.shared_inter = c1.config.shared_inter + 7;
  ASSERT_NE(k0.inter, c1.config.inter);
  ASSERT_NE(k0.shared_inter, c1.config.shared_inter);
  ASSERT_LE(k0.top_k, k0.num_experts);
  const testing::GoldenCase c0 = testing::RandomCase(k0, 13, 29, "layer0");
  const std::string dir = testing::MakeTempDir("acme_layers_");
  WriteAcmeCheckpoint({&c0, &c1}, dir + "/model");
  json family = json::parse(kAcmeFamily);
  family["layer_lists"] = {"expert_width", "experts_per_token", "shared_width"};
  WriteText(dir + "/acme.json", family.dump(2));
  for (const int64_t direct : {int64_t{-1}, int64_t{0}}) {
    SCOPED_TRACE(direct == 0 ? "all-to-all" : "default");
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + dir + "/model"};
    co.router_args = {"--family-file=" + dir + "/acme.json"};
    co.workers = 2;
    co.direct_step_tokens = direct;
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    auto info = cluster.client().GetModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->top_k(), k0.top_k);
    EXPECT_EQ(info->inter(), k0.inter);
    EXPECT_EQ(info->layer_config_json(), MoeLayerConfigToJson(k0));
    ASSERT_EQ(info->layer_config_overrides_json().size(), 1u);
    EXPECT_EQ(info->layer_config_overrides_json().at(1),
              MoeLayerConfigToJson(c1.config));
    for (const testing::GoldenCase* lc : {&c0, &c1}) {
      const int32_t layer = lc == &c0 ? 0 : 1;
      testing::ExpectServesCase(cluster, *lc, layer);
      auto stats = cluster.client().GetExpertStats(layer, /*reset=*/true);
      ASSERT_TRUE(stats.ok()) << stats.status();
      int64_t slots = 0;
      for (int64_t t : stats->tokens_per_expert()) slots += t;
      EXPECT_EQ(slots, lc->tokens * lc->config.top_k);
    }
  }
  // A list that gives the layers different expert counts is refused at
  // start, naming the key and the layer.
  json bad = json::parse(std::ifstream(dir + "/model/config.json"));
  bad["n_experts"] = {c1.config.num_experts, c1.config.num_experts - 1};
  WriteText(dir + "/model/config.json", bad.dump());
  family["layer_lists"].push_back("n_experts");
  WriteText(dir + "/acme.json", family.dump(2));
  testing::CommandResult r =
      testing::RunCommand({testing::RouterBinary(), "--model=" + dir + "/model",
                           "--family-file=" + dir + "/acme.json",
                           "--listen=127.0.0.1:0", "--num-workers=0"},
                          std::chrono::seconds(30));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n_experts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layer 1"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(FamilyFileService, APrintedBuiltInServesUnderAnotherModelType) {
  const testing::GoldenCase c = Case("mixtral_like");
  const std::string dir = testing::MakeTempDir("printed_");
  testing::CommandResult printed =
      testing::RunCommand({testing::RouterBinary(), "--print-family=mixtral"},
                          std::chrono::seconds(30));
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  json doc = json::parse(printed.output.substr(printed.output.find('{')),
                         nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << printed.output;
  doc["model_type"] = "mixtral_as_file";
  doc["architectures"] = {"MixtralForCausalLM"};
  WriteText(dir + "/mixtral.json", doc.dump(2));
  testing::HfWriteOptions o;
  o.family = HfFamily::kMixtral;
  o.layer = 1;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir + "/model").ok());
  ASSERT_TRUE(testing::SetHfConfigKey(dir + "/model", "model_type",
                                      R"("mixtral_as_file")")
                  .ok());
  // The flag may be repeated; a second, unrelated file rides along.
  WriteText(dir + "/acme.json", kAcmeFamily);
  ExpectServed(c, dir + "/model",
               {"--family-file=" + dir + "/acme.json",
                "--family-file=" + dir + "/mixtral.json"},
               "mixtral_as_file");
  fs::remove_all(dir);
}

TEST(FamilyFileService, BadFilesAndMissingTensorsAreRefusedAtStart) {
  const testing::GoldenCase c = Case("qwen2_moe_like");
  const std::string dir = testing::MakeTempDir("badfamily_");
  WriteAcmeCheckpoint(c, dir + "/model");
  struct Bad {
    std::string what;
    std::function<void(json&)> change;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {"unknown field", [](json& d) { d["moe"]["expertz"] = 1; },
       "'moe.expertz'"},
      {"wrong type", [](json& d) { d["text_config"] = "no"; }, "'text_config'"},
      // The family names a key this config does not have.
      {"a key missing from the config",
       [](json& d) { d["moe"]["inter"]["key"] = "ffn_width"; }, "'ffn_width'"},
      // A template that finds no tensor in the checkpoint.
      {"a template that finds no tensor",
       [](json& d) {
         d["names"]["per_expert"][3]["name"] = "{p}moe.ffn.{e}.w_out.weight";
       },
       "names.per_expert"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    json doc = json::parse(kAcmeFamily);
    b.change(doc);
    WriteText(dir + "/bad.json", doc.dump());
    testing::CommandResult r = testing::RunCommand(
        {testing::RouterBinary(), "--model=" + dir + "/model",
         "--family-file=" + dir + "/bad.json", "--listen=127.0.0.1:0",
         "--num-workers=0"},
        std::chrono::seconds(30));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(b.expected), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bad.json"), std::string::npos) << r.output;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe

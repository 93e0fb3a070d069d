// Nemotron 3 (ModelOpt NVFP4) and Kimi K3 (compressed-tensors MXFP4) as
// released, each broken in one way a bad export or a hand-edited config
// would be, served by a router with 2 workers with --weight-dtype auto: the
// cluster never becomes ready, and its logs name the tensor or config field
// and what was expected. What the router reads (config, router, latent
// projections) it refuses and exits; a bad routed expert tensor, which only
// the workers read, keeps each worker from joining with that message, and
// the router, still up, answers the next request at once with it. The same
// directory mended is then served, so the refusal came from the one thing
// broken.
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// One way to break a released checkpoint in `dir`, and the texts the
// refusal must contain.
struct Breakage {
  const char* what;
  const char* golden;
  HfFamily family;
  std::function<absl::Status(const std::string& dir)> apply;
  std::vector<std::string> says;
  // A routed expert tensor only the workers read: the router stays up.
  bool workers_refuse = false;
};

constexpr char kNemotron[] = "backbone.layers.1.mixer.";
constexpr char kKimi[] = "language_model.model.layers.1.block_sparse_moe.";

std::string Nemotron(const std::string& s) { return kNemotron + s; }
std::string Kimi(const std::string& s) { return kKimi + s; }

std::vector<Breakage> Breakages() {
  using testing::ReplaceHfTensor;
  using testing::ReplaceHfTensorBytes;
  using testing::SetHfConfigKey;
  const std::string up2 = Nemotron("experts.2.up_proj.");
  return {
      {"missing_latent_tensor",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [](const std::string& d) {
         return ReplaceHfTensor(d, Nemotron("fc1_latent_proj.weight"), {});
       },
       {Nemotron("fc1_latent_proj.weight")}},
      {"misshaped_latent_tensor",
       "kimi_k3_like",
       HfFamily::kKimiK3,
       [](const std::string& d) {
         return ReplaceHfTensor(d, Kimi("routed_expert_up_proj.weight"),
                                {64, 33});
       },
       {Kimi("routed_expert_up_proj.weight"), "[64, 32]"}},
      {"latent_width_not_the_config",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [](const std::string& d) {
         return SetHfConfigKey(d, "moe_latent_size", "48");
       },
       // Refused at open, naming the key and both widths, before any
       // routed expert is read at the wrong width.
       {"config key 'moe_latent_size' is 48",
        Nemotron("fc1_latent_proj.weight"), "expected [48, ",
        "found latent width 32"}},
      {"nvfp4_scale_shape",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [up2](const std::string& d) {
         return ReplaceHfTensorBytes(d, up2 + "weight_scale", DType::kF8E4M3,
                                     {32, 3}, std::vector<uint8_t>(96, 0x38));
       },
       {up2 + "weight_scale", "[32, 2]"},
       true},
      {"nvfp4_scale_dtype",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [up2](const std::string& d) {
         return ReplaceHfTensor(d, up2 + "weight_scale", {32, 2});
       },
       {up2 + "weight_scale", "F8_E4M3"},
       true},
      {"nvfp4_global_scale_missing",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [up2](const std::string& d) {
         return ReplaceHfTensor(d, up2 + "weight_scale_2", {});
       },
       {up2 + "weight_scale_2"},
       true},
      {"unknown_quant_algo",
       "nemotron3_nvfp4",
       HfFamily::kNemotronH,
       [](const std::string& d) {
         return SetHfConfigKey(
             d, "quantization_config",
             R"({"quant_method": "modelopt", "quant_algo": "W4A16_AWQ"})");
       },
       {"'W4A16_AWQ'", "NVFP4"}},
      {"unknown_quant_method",
       "kimi_k3_like",
       HfFamily::kKimiK3,
       [](const std::string& d) {
         return SetHfConfigKey(d, "quantization_config",
                               R"({"quant_method": "bitsandbytes"})");
       },
       {"'bitsandbytes'", "quant_method"}},
      {"unknown_family",
       "kimi_k3_like",
       HfFamily::kKimiK3,
       [](const std::string& d) {
         return SetHfConfigKey(d, "model_type", R"("kimi_k4")");
       },
       {"'kimi_k4'", "kimi_k3"}},
  };
}

class ReleasedBadInputTest : public ::testing::TestWithParam<Breakage> {};

TEST_P(ReleasedBadInputTest, RefusedAtLoadNamingWhatIsWrong) {
  const Breakage& b = GetParam();
  auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + b.golden +
                                   ".safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  testing::HfWriteOptions o;
  o.family = b.family;
  o.layer = 1;
  o.shards = 3;
  o.released = b.family == HfFamily::kKimiK3;
  o.nvfp4_experts = b.family == HfFamily::kNemotronH;
  const std::string dir = testing::MakeTempDir(std::string(b.what) + "_");
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  ASSERT_TRUE(b.apply(dir).ok());
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = 2;
  co.router_args = {"--weight-dtype=auto"};
  {
    testing::LocalCluster::Options quick = co;
    quick.ready_timeout = std::chrono::seconds(10);
    testing::LocalCluster bad;
    const absl::Status started = bad.Start(quick);
    EXPECT_FALSE(started.ok()) << bad.Logs();
    const std::string logs = bad.Logs();
    for (const std::string& s : b.says) {
      EXPECT_NE(logs.find(s), std::string::npos) << "no '" << s << "' in:\n"
                                                 << logs;
    }
    // The router, waiting for workers that cannot join, answers a request
    // at once with why.
    ASSERT_EQ(bad.router().Running(), b.workers_refuse) << logs;
    if (b.workers_refuse) {
      auto y = bad.client().Forward(1, c->x.data(), c->tokens, c->config.hidden,
                                    ForwardOptions{});
      ASSERT_FALSE(y.ok());
      EXPECT_EQ(y.status().code(), absl::StatusCode::kUnavailable);
      EXPECT_NE(y.status().message().find(b.says.front()), std::string::npos)
          << y.status();
    }
  }

  // Mended (written afresh), the same directory is served.
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  testing::LocalCluster cluster;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto y = cluster.client().Forward(1, c->x.data(), c->tokens, c->config.hidden,
                                    ForwardOptions{});
  ASSERT_TRUE(y.ok()) << y.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(y->y, c->y, testing::kF32Tol));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Released, ReleasedBadInputTest,
                         ::testing::ValuesIn(Breakages()),
                         [](const auto& info) {
                           return std::string(info.param.what);
                         });

}  // namespace
}  // namespace moe

#include "tests/testutil/hf_writer.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/safetensors.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kVocab = 32;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int64_t> ints = {};  // an I64 tensor (tid2eid) instead
};

std::vector<float> Filler(uint64_t seed, int64_t n, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
  }
  return v;
}

std::vector<float> Slice(const std::vector<float>& v, int64_t begin,
                         int64_t count) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + count);
}

void AddMoeLayer(const GoldenCase& c, HfFamily f, int64_t layer, bool golden,
                 uint64_t seed, std::vector<Tensor>* out) {
  const MoeLayerConfig& k = c.config;
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter,
                S = k.shared_inter;
  auto values = [&](const std::vector<float>& src, int64_t begin, int64_t count,
                    uint64_t salt) {
    return golden ? Slice(src, begin, count) : Filler(seed + salt, count, 0.2f);
  };
  auto name = [&](WeightRole r, int64_t e) {
    return HfTensorName(f, layer, r, e);
  };
  out->push_back(
      {name(WeightRole::kGate, -1), {E, H}, values(c.gate, 0, E * H, 1)});
  if (k.use_bias) {
    out->push_back(
        {name(WeightRole::kExpertBias, -1), {E}, values(c.bias, 0, E, 2)});
  }
  if (k.router_bias) {
    out->push_back({name(WeightRole::kRouterBias, -1),
                    {E},
                    values(c.router_bias, 0, E, 7)});
  }
  if (k.hash_routed()) {
    Tensor t{name(WeightRole::kTid2Eid, -1), {k.hash_vocab, k.top_k}, {}, {}};
    if (golden) {
      t.ints = c.tid2eid;
    } else {
      for (int64_t v = 0; v < k.hash_vocab * k.top_k; ++v) {
        t.ints.push_back((v % k.top_k + v / k.top_k) % E);
      }
    }
    out->push_back(std::move(t));
  }
  if (k.expert_bias) {
    for (int64_t e = 0; e < E; ++e) {
      out->push_back(
          {name(WeightRole::kB1, e), {I}, values(c.b1, e * I, I, 3000 + e)});
      out->push_back(
          {name(WeightRole::kB3, e), {I}, values(c.b3, e * I, I, 4000 + e)});
      out->push_back(
          {name(WeightRole::kB2, e), {H}, values(c.b2, e * H, H, 5000 + e)});
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    out->push_back({name(WeightRole::kW1, e),
                    {I, H},
                    values(c.w1, e * I * H, I * H, 10 + e)});
    out->push_back({name(WeightRole::kW3, e),
                    {I, H},
                    values(c.w3, e * I * H, I * H, 1000 + e)});
    out->push_back({name(WeightRole::kW2, e),
                    {H, I},
                    values(c.w2, e * I * H, I * H, 2000 + e)});
  }
  if (S > 0) {
    out->push_back(
        {name(WeightRole::kSharedW1, -1), {S, H}, values(c.sw1, 0, S * H, 3)});
    out->push_back(
        {name(WeightRole::kSharedW3, -1), {S, H}, values(c.sw3, 0, S * H, 4)});
    out->push_back(
        {name(WeightRole::kSharedW2, -1), {H, S}, values(c.sw2, 0, S * H, 5)});
  }
  if (k.shared_gate) {
    out->push_back(
        {name(WeightRole::kSharedGate, -1), {1, H}, values(c.sgate, 0, H, 6)});
  }
}

void AddUnrelated(int64_t H, int64_t layer, uint64_t seed,
                  std::vector<Tensor>* out) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    out->push_back({absl::StrCat(p, "self_attn.", proj, ".weight"),
                    {H, H},
                    Filler(seed + layer * 7 + proj[0], H * H, 0.1f)});
  }
  out->push_back(
      {p + "input_layernorm.weight", {H}, std::vector<float>(H, 1.0f)});
  out->push_back({p + "post_attention_layernorm.weight",
                  {H},
                  std::vector<float>(H, 1.0f)});
}

void AddDenseMlp(int64_t H, int64_t layer, uint64_t seed,
                 std::vector<Tensor>* out) {
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.");
  out->push_back(
      {p + "gate_proj.weight", {2 * H, H}, Filler(seed + 91, 2 * H * H, 0.1f)});
  out->push_back(
      {p + "up_proj.weight", {2 * H, H}, Filler(seed + 92, 2 * H * H, 0.1f)});
  out->push_back(
      {p + "down_proj.weight", {H, 2 * H}, Filler(seed + 93, 2 * H * H, 0.1f)});
}

absl::Status WriteJson(const fs::path& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(2);
  return f ? absl::OkStatus()
           : absl::InternalError(absl::StrCat("cannot write ", path.string()));
}

}  // namespace

std::string HfConfigJson(const MoeLayerConfig& c, HfFamily f,
                         int64_t num_layers) {
  json j;
  j["model_type"] = HfFamilyName(f);
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = num_layers;
  j["num_experts_per_tok"] = c.top_k;
  j["vocab_size"] = kVocab;
  j["num_attention_heads"] = 4;
  switch (f) {
    case HfFamily::kMixtral:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      break;
    case HfFamily::kOlmoe:
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["norm_topk_prob"] = c.route_norm;
      break;
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
      j["num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["norm_topk_prob"] = c.route_norm;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = {0};
      if (f == HfFamily::kQwen2Moe) {
        j["shared_expert_intermediate_size"] = c.shared_inter;
      }
      break;
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3:
      j["n_routed_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["n_shared_experts"] = c.shared_inter / c.inter;
      j["norm_topk_prob"] = c.route_norm;
      j["routed_scaling_factor"] = c.route_scale;
      j["first_k_dense_replace"] = 1;
      j["moe_layer_freq"] = 1;
      // The 2026 score functions travel as moe_score_func (below).
      j["scoring_func"] =
          c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
      j["n_group"] = c.n_groups > 0 ? c.n_groups : 1;
      j["topk_group"] = c.n_groups > 0 ? c.topk_groups : 1;
      if (f == HfFamily::kDeepseekV3) {
        j["topk_method"] = "noaux_tc";
        j["num_nextn_predict_layers"] = 1;
      } else {
        j["topk_method"] = c.n_groups > 0 ? "group_limited_greedy" : "greedy";
      }
      break;
  }
  if (c.capacity_factor > 0) j["moe_capacity_factor"] = c.capacity_factor;
  if (c.routing == RoutingMode::kExpertChoice)
    j["moe_routing"] = "expert_choice";
  if (c.score_before_experts) j["moe_score_before_experts"] = true;
  // The 2026 options in the generic form (core/hf_config.cc ReadExtensions).
  if (c.score_func == ScoreFunc::kSqrtSoftplus ||
      c.score_func == ScoreFunc::kTopkSoftmax) {
    j["moe_score_func"] = ScoreFuncName(c.score_func);
  }
  if (c.has_2026_options()) {
    j["moe_use_bias"] = c.use_bias;
    j["moe_router_bias"] = c.router_bias;
    j["moe_expert_bias"] = c.expert_bias;
    j["moe_act"] = ActivationName(c.act);
    j["moe_act_alpha"] = c.act_alpha;
    j["moe_act_limit"] = c.act_limit;
    j["moe_norm_min"] = c.norm_min;
    j["moe_hash_vocab"] = c.hash_vocab;
  }
  return j.dump(2);
}

std::vector<HfFamily> FamiliesFor(const MoeLayerConfig& c) {
  std::vector<HfFamily> out;
  for (HfFamily f :
       {HfFamily::kMixtral, HfFamily::kQwen2Moe, HfFamily::kQwen3Moe,
        HfFamily::kOlmoe, HfFamily::kDeepseekV2, HfFamily::kDeepseekV3}) {
    auto spec = ParseHfConfig(HfConfigJson(c, f, 3), "probe");
    if (!spec.ok()) continue;
    MoeLayerConfig got = spec->info.layer;
    // One group keeping one group is no group limit at all.
    if (got.n_groups == 1 && c.n_groups == 0) {
      got.n_groups = 0;
      got.topk_groups = 0;
      got.group_score = c.group_score;
    }
    if (got == c) out.push_back(f);
  }
  return out;
}

absl::Status WriteHfCheckpoint(const GoldenCase& c, const HfWriteOptions& o,
                               const std::string& dir) {
  const MoeLayerConfig& k = c.config;
  const int64_t H = k.hidden;
  const int64_t num_layers = o.layer + 2;
  fs::create_directories(dir);
  const std::string config = HfConfigJson(k, o.family, num_layers);
  MOE_ASSIGN_OR_RETURN(HfModelSpec spec, ParseHfConfig(config, dir));
  if (!spec.info.HasLayer(o.layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", o.layer, " would not be an MoE layer"));
  }

  std::vector<Tensor> tensors;
  tensors.push_back({"model.embed_tokens.weight",
                     {kVocab, H},
                     Filler(o.seed, kVocab * H, 0.5f)});
  for (int64_t l = 0; l < num_layers; ++l) {
    AddUnrelated(H, l, o.seed, &tensors);
    if (spec.info.HasLayer(l)) {
      AddMoeLayer(c, o.family, l, l == o.layer, o.seed + 100 * l, &tensors);
    } else {
      AddDenseMlp(H, l, o.seed + l, &tensors);
    }
  }
  if (o.family == HfFamily::kDeepseekV3) {
    // The MTP module is stored as layer num_hidden_layers; poison it so that
    // loading it by mistake cannot go unnoticed.
    std::vector<Tensor> mtp;
    AddMoeLayer(c, o.family, num_layers, false, o.seed, &mtp);
    for (auto& t : mtp) {
      std::fill(t.values.begin(), t.values.end(),
                std::numeric_limits<float>::quiet_NaN());
      tensors.push_back(std::move(t));
    }
    tensors.push_back(
        {absl::StrCat("model.layers.", num_layers, ".eh_proj.weight"),
         {H, 2 * H},
         Filler(o.seed, 2 * H * H, 0.1f)});
  }
  tensors.push_back({"model.norm.weight", {H}, std::vector<float>(H, 1.0f)});
  tensors.push_back(
      {"lm_head.weight", {kVocab, H}, Filler(o.seed + 5, kVocab * H, 0.5f)});

  const int shards = std::max(1, o.shards);
  std::vector<SafetensorsWriter> writers(shards);
  json weight_map = json::object();
  auto shard_name = [&](int s) {
    return shards == 1 && !o.write_index
               ? std::string("model.safetensors")
               : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                 shards);
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const int s = static_cast<int>(i % shards);
    const bool router = absl::EndsWith(t.name, "mlp.gate.weight") ||
                        absl::EndsWith(t.name, "moe.gate.weight") ||
                        absl::EndsWith(t.name, "e_score_correction_bias") ||
                        absl::EndsWith(t.name, "gate.bias");
    const DType dtype = !t.ints.empty() ? DType::kI64
                        : router        ? o.router_storage
                                        : o.storage;
    std::vector<std::byte> bytes(
        (t.ints.empty() ? t.values.size() : t.ints.size()) * DTypeSize(dtype));
    if (!t.ints.empty()) {
      std::memcpy(bytes.data(), t.ints.data(), bytes.size());
    } else if (!ConvertFromF32(dtype, t.values.data(), t.values.size(),
                               bytes.data())) {
      return absl::InvalidArgumentError(
          "storage dtype must be F32, BF16 or F16");
    }
    writers[s].Add(t.name, dtype, t.shape, bytes.data(), bytes.size());
    weight_map[t.name] = shard_name(s);
  }
  for (int s = 0; s < shards; ++s) {
    writers[s].SetMetadata("format", "pt");
    MOE_RETURN_IF_ERROR(
        writers[s].WriteFile((fs::path(dir) / shard_name(s)).string()));
  }
  if (o.write_index) {
    json index = {{"metadata", {{"total_size", 0}}},
                  {"weight_map", weight_map}};
    MOE_RETURN_IF_ERROR(
        WriteJson(fs::path(dir) / "model.safetensors.index.json", index));
  }
  std::ofstream(fs::path(dir) / "config.json") << config;
  return absl::OkStatus();
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path root = base != nullptr ? fs::path(base) : fs::temp_directory_path();
  std::string templ = (root / (prefix + "XXXXXX")).string();
  char* made = ::mkdtemp(templ.data());
  return made != nullptr ? std::string(made) : std::string();
}

absl::StatusOr<std::string> WriteCaseCheckpoint(const GoldenCase& c,
                                                const std::string& prefix,
                                                HfWriteOptions o) {
  const std::vector<HfFamily> families = FamiliesFor(c.config);
  if (families.empty()) {
    return absl::InvalidArgumentError(
        "no checkpoint family expresses golden case " + c.name);
  }
  const std::string dir = MakeTempDir(prefix);
  if (dir.empty()) {
    return absl::InternalError("cannot make a temp dir for " + prefix);
  }
  o.family = families.back();
  if (absl::Status s = WriteHfCheckpoint(c, o, dir); !s.ok()) return s;
  return dir;
}

}  // namespace moe::testing

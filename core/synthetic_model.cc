#include "core/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from a counter.
float UniformAt(uint64_t key, uint64_t i) {
  const uint64_t bits = SplitMix64(key ^ SplitMix64(i));
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

class SyntheticModel : public ModelSource {
 public:
  explicit SyntheticModel(const SyntheticSpec& spec) : spec_(spec) {
    info_.family = "synthetic";
    info_.source = absl::StrCat("synthetic seed=", spec.seed);
    info_.num_layers = spec.num_layers;
    for (int64_t l = 0; l < spec.num_layers; ++l) info_.moe_layers.push_back(l);
    info_.layer = spec.layer;
  }

  const ModelInfo& info() const override { return info_; }

  absl::StatusOr<WeightTensor> Get(int64_t layer, WeightRole role,
                                   int64_t expert) const override {
    const MoeLayerConfig& c = spec_.layer;
    if (!info_.HasLayer(layer)) {
      return absl::NotFoundError(
          absl::StrCat("synthetic model has no MoE layer ", layer));
    }
    WeightTensor t;
    t.name = absl::StrCat("synthetic layer ", layer, " ", WeightRoleName(role),
                          expert >= 0 ? absl::StrCat(" expert ", expert) : "");
    t.dtype = DType::kF32;
    t.shape = ExpectedShape(c, role);
    if (role == WeightRole::kTid2Eid) return HashTable(layer, std::move(t));
    // Scale so activations stay O(1): std of U(-a, a) is a / sqrt(3).
    float fan_in;
    switch (role) {
      case WeightRole::kW2:
        fan_in = static_cast<float>(c.inter);
        break;
      case WeightRole::kSharedW2:
        fan_in = static_cast<float>(c.shared_inter);
        break;
      case WeightRole::kW1:
      case WeightRole::kW3:
        fan_in = static_cast<float>(c.expert_width());
        break;
      case WeightRole::kLatentW2:
        fan_in = static_cast<float>(c.latent);
        break;
      case WeightRole::kExpertBias:
      case WeightRole::kRouterBias:
      case WeightRole::kB1:
      case WeightRole::kB3:
      case WeightRole::kB2:
      case WeightRole::kLatentB1:
      case WeightRole::kLatentB2:
        fan_in = 300.0f;
        break;  // small offsets
      default:
        fan_in = static_cast<float>(c.hidden);
    }
    // Norm weights and scales multiply: around 1, so each one matters.
    const bool around_one =
        role == WeightRole::kLatentNorm || role == WeightRole::kGateScale ||
        role == WeightRole::kPerExpertScale ||
        role == WeightRole::kExpertsInNorm ||
        role == WeightRole::kExpertsOutNorm ||
        role == WeightRole::kSharedInNorm || role == WeightRole::kSharedOutNorm;
    if (around_one) fan_in = 12.0f;  // U(-0.5, 0.5)
    const float a = std::sqrt(3.0f / fan_in);
    const uint64_t key = SplitMix64(
        spec_.seed ^ SplitMix64((static_cast<uint64_t>(layer) << 40) ^
                                (static_cast<uint64_t>(role) << 32) ^
                                static_cast<uint64_t>(expert + 1)));
    const int64_t n = t.numel();
    t.owned.resize(static_cast<size_t>(n) * sizeof(float));
    auto* out = reinterpret_cast<float*>(t.owned.data());
    for (int64_t i = 0; i < n; ++i) {
      out[i] = (around_one ? 1.0f : 0.0f) + a * UniformAt(key, i);
    }
    if (role == WeightRole::kGate && spec_.gate_zipf != 0) {
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const float scale = static_cast<float>(
            std::pow(static_cast<double>(e + 1), -spec_.gate_zipf));
        for (int64_t h = 0; h < c.hidden; ++h) out[e * c.hidden + h] *= scale;
      }
    }
    t.data = t.owned.data();
    return t;
  }

 private:
  // A hash layer's [V, k] table: k distinct pseudo-random experts per token.
  WeightTensor HashTable(int64_t layer, WeightTensor t) const {
    const MoeLayerConfig& c = spec_.layer;
    t.dtype = DType::kI64;
    t.owned.resize(static_cast<size_t>(t.numel()) * sizeof(int64_t));
    auto* out = reinterpret_cast<int64_t*>(t.owned.data());
    const uint64_t key = SplitMix64(spec_.seed ^ (0x7a5ull << 48) ^
                                    static_cast<uint64_t>(layer));
    for (int64_t v = 0; v < c.hash_vocab; ++v) {
      int64_t* row = out + v * c.top_k;
      uint64_t draw = key ^ SplitMix64(static_cast<uint64_t>(v));
      for (int64_t j = 0; j < c.top_k;) {
        draw = SplitMix64(draw);
        const int64_t e = static_cast<int64_t>(draw % c.num_experts);
        if (std::find(row, row + j, e) == row + j) row[j++] = e;
      }
    }
    t.data = t.owned.data();
    return t;
  }

  SyntheticSpec spec_;
  ModelInfo info_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelSource>> MakeSyntheticModel(
    const SyntheticSpec& spec) {
  MOE_RETURN_IF_ERROR(spec.layer.Validate());
  if (spec.num_layers < 1 || spec.num_layers > 1024) {
    return absl::InvalidArgumentError(
        "synthetic model needs between 1 and 1024 layers");
  }
  return std::make_unique<SyntheticModel>(spec);
}

absl::StatusOr<SyntheticSpec> MakeSyntheticSpec(const SyntheticArgs& a) {
  nlohmann::json j = nlohmann::json::object();
  if (!a.options_json.empty()) {
    j = nlohmann::json::parse(a.options_json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          "model options must be a JSON object, e.g. {\"score_func\": "
          "\"sigmoid\"}");
    }
  }
  j["hidden"] = a.hidden;
  j["inter"] = a.inter;
  j["experts"] = a.experts;
  j["top_k"] = a.top_k;
  j["shared_inter"] = a.shared_inter;
  SyntheticSpec spec;
  MOE_ASSIGN_OR_RETURN(spec.layer, ParseMoeLayerConfigJson(j.dump()));
  spec.num_layers = a.layers;
  spec.seed = a.seed;
  if (!(a.zipf >= 0 && a.zipf <= 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic zipf exponent ", a.zipf, " is not in [0, 8]"));
  }
  spec.gate_zipf = a.zipf;
  if (spec.num_layers < 1 || spec.num_layers > 1024) {
    return absl::InvalidArgumentError("'layers' must be in [1, 1024]");
  }
  return spec;
}

void FillSyntheticInput(uint64_t seed, int64_t count, float* out) {
  const uint64_t key = SplitMix64(seed ^ 0x5eed5eed5eedull);
  for (int64_t i = 0; i < count; ++i) {
    // Sum of three uniforms: mean 0, std 1, bounded tails.
    float s = 0.0f;
    for (uint64_t j = 0; j < 3; ++j) s += UniformAt(key, 3 * i + j);
    out[i] = s;
  }
}

}  // namespace moe

#include "core/hf_config_layers.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace moe {
namespace {

using json = nlohmann::json;

void AllLayers(ModelInfo* info) {
  for (int64_t l = 0; l < info->num_layers; ++l) info->moe_layers.push_back(l);
}

// Qwen2/3-MoE: layer L is sparse unless listed in mlp_only_layers, and only
// every decoder_sparse_step-th layer.
absl::Status QwenLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t step, r.Int("decoder_sparse_step", 1));
  if (step <= 0) return r.Error("decoder_sparse_step", "must be >= 1");
  std::vector<int64_t> dense;
  if (r.Present("mlp_only_layers")) {
    const json& v = r.raw().at("mlp_only_layers");
    if (!v.is_array()) return r.Error("mlp_only_layers", "must be a list");
    for (const auto& x : v) {
      if (!x.is_number_integer()) {
        return r.Error("mlp_only_layers", "must hold integers");
      }
      dense.push_back(x.get<int64_t>());
    }
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (std::find(dense.begin(), dense.end(), l) == dense.end() &&
        (l + 1) % step == 0) {
      info->moe_layers.push_back(l);
    }
  }
  return absl::OkStatus();
}

absl::Status DeepseekLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t first_dense, r.Int("first_k_dense_replace", 0));
  MOE_ASSIGN_OR_RETURN(int64_t freq, r.Int("moe_layer_freq", 1));
  if (freq <= 0) return r.Error("moe_layer_freq", "must be >= 1");
  // Layer num_hidden_layers (the MTP module of V3) is never served.
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (l >= first_dense && l % freq == 0) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// GLM-4.5: every layer from first_k_dense_replace on is MoE (no
// moe_layer_freq); its MTP layers come after num_hidden_layers.
absl::Status GlmLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t first_dense, r.Int("first_k_dense_replace", 0));
  for (int64_t l = std::max<int64_t>(first_dense, 0); l < info->num_layers;
       ++l) {
    info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// Llama 4: `moe_layers` when given, else every interleave_moe_layer_step-th
// layer (L % step == step - 1).
absl::Status Llama4Layers(const ConfigReader& r, ModelInfo* info) {
  if (r.Present("moe_layers")) {
    const json& v = r.raw().at("moe_layers");
    if (!v.is_array()) return r.Error("moe_layers", "must be a list");
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() >= info->num_layers) {
        return r.Error("moe_layers",
                       absl::StrCat("must hold layer ids in [0, ",
                                    info->num_layers, "), got ", x.dump()));
      }
      info->moe_layers.push_back(x.get<int64_t>());
    }
    std::sort(info->moe_layers.begin(), info->moe_layers.end());
    info->moe_layers.erase(
        std::unique(info->moe_layers.begin(), info->moe_layers.end()),
        info->moe_layers.end());
    return absl::OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(int64_t step, r.Int("interleave_moe_layer_step", 1));
  if (step <= 0) return r.Error("interleave_moe_layer_step", "must be >= 1");
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (l % step == step - 1) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// ERNIE 4.5: every moe_layer_interval-th layer from moe_layer_start_index
// to moe_layer_end_index (-1: the last).
absl::Status ErnieLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t interval, r.Int("moe_layer_interval", 1));
  MOE_ASSIGN_OR_RETURN(int64_t start, r.Int("moe_layer_start_index", 1));
  MOE_ASSIGN_OR_RETURN(int64_t end, r.Int("moe_layer_end_index", -1));
  if (interval <= 0) return r.Error("moe_layer_interval", "must be >= 1");
  if (end < 0) end = info->num_layers - 1;
  for (int64_t l = std::max<int64_t>(start, 0);
       l <= end && l < info->num_layers; ++l) {
    if ((l + 1) % interval == 0) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// Nemotron 3's layer kinds: hybrid_override_pattern (one character per
// layer, 'E' MoE, 'M' Mamba, '*' attention, '-' dense MLP) or transformers
// v5's layers_block_type list ("moe", "mamba", "linear_attention",
// "full_attention", "mlp").
absl::Status NemotronLayers(const ConfigReader& r, ModelInfo* info) {
  std::vector<bool> moe;
  if (r.Present("layers_block_type")) {
    const json& v = r.raw().at("layers_block_type");
    if (!v.is_array()) return r.Error("layers_block_type", "must be a list");
    for (const auto& x : v) {
      const bool known = x == "moe" || x == "mamba" ||
                         x == "linear_attention" || x == "full_attention" ||
                         x == "attention" || x == "mlp";
      if (!known) {
        return r.Error("layers_block_type",
                       absl::StrCat("entry ", moe.size(), " is ", x.dump(),
                                    ", not moe, mamba, linear_attention, "
                                    "full_attention or mlp"));
      }
      moe.push_back(x == "moe");
    }
  } else if (r.Present("hybrid_override_pattern")) {
    MOE_ASSIGN_OR_RETURN(std::string pattern,
                         r.String("hybrid_override_pattern", ""));
    for (char ch : pattern) {
      if (ch != 'E' && ch != 'M' && ch != '*' && ch != '-') {
        return r.Error("hybrid_override_pattern",
                       absl::StrCat("holds '", std::string(1, ch),
                                    "', not one of E (MoE), M (Mamba), * "
                                    "(attention), - (MLP)"));
      }
      moe.push_back(ch == 'E');
    }
  } else {
    return r.Error("hybrid_override_pattern",
                   absl::StrCat("is missing (nor is layers_block_type "
                                "given): ",
                                info->family, " names its MoE layers there"));
  }
  if (static_cast<int64_t>(moe.size()) != info->num_layers) {
    return r.Error(
        r.Present("layers_block_type") ? "layers_block_type"
                                       : "hybrid_override_pattern",
        absl::StrCat("describes ", moe.size(),
                     " layers, not num_hidden_layers ", info->num_layers));
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (moe[l]) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// Snowflake Arctic: every moe_layer_frequency-th layer is MoE (its model
// code's default is 2), the others keep a dense MLP in place of the block.
absl::Status ArcticLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t freq, r.Int("moe_layer_frequency", 2));
  if (freq <= 0) return r.Error("moe_layer_frequency", "must be >= 1");
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if ((l + 1) % freq == 0) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// Jamba: layer L has num_experts experts when L % expert_layer_period ==
// expert_layer_offset and one (a dense MLP) otherwise; one expert is no
// MoE, so a model with num_experts 1 has no MoE layer.
absl::Status JambaLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t period, r.Int("expert_layer_period", 2));
  MOE_ASSIGN_OR_RETURN(int64_t offset, r.Int("expert_layer_offset", 1));
  if (period <= 0) return r.Error("expert_layer_period", "must be >= 1");
  if (offset < 0 || offset >= period) {
    return r.Error("expert_layer_offset",
                   absl::StrCat("must be in [0, expert_layer_period ", period,
                                "), got ", offset));
  }
  if (info->layer.num_experts <= 1) return absl::OkStatus();
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (l % period == offset) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}
// AFMoE, LFM2-MoE: every layer from num_dense_layers on. The key is
// required: the families' config classes disagree on its default.
absl::Status NumDenseLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t dense, r.Int("num_dense_layers"));
  if (dense < 0) return r.Error("num_dense_layers", "must be >= 0");
  for (int64_t l = dense; l < info->num_layers; ++l) {
    info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}
// Step-3 and Step-3.5: moe_layers_enum, a string of comma-separated layer
// ids, else every layer but the first.
absl::Status StepLayers(const ConfigReader& r, ModelInfo* info) {
  if (!r.Present("moe_layers_enum")) {
    for (int64_t l = 1; l < info->num_layers; ++l) {
      info->moe_layers.push_back(l);
    }
    return absl::OkStatus();
  }
  // Releases write a string ("4,5,...,59"); a config saved by transformers
  // from Step3TextConfig's tuple default writes a list of ints.
  const json& v = r.raw().at("moe_layers_enum");
  std::vector<std::string> parts;
  if (v.is_string()) {
    parts = absl::StrSplit(v.get<std::string>(), ',');
  } else if (v.is_array()) {
    for (const json& id : v) {
      if (!id.is_number_integer()) {
        return r.Error("moe_layers_enum", "must list integer layer ids");
      }
      parts.push_back(absl::StrCat(id.get<int64_t>()));
    }
  } else {
    return r.Error("moe_layers_enum",
                   "must be a string of comma-separated layer ids, or a "
                   "list of them");
  }
  for (absl::string_view part : parts) {
    int64_t l = -1;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &l) || l < 0 ||
        l >= info->num_layers) {
      return r.Error("moe_layers_enum",
                     absl::StrCat("holds '", part, "', not a layer id in [0, ",
                                  info->num_layers, ")"));
    }
    info->moe_layers.push_back(l);
  }
  std::sort(info->moe_layers.begin(), info->moe_layers.end());
  info->moe_layers.erase(
      std::unique(info->moe_layers.begin(), info->moe_layers.end()),
      info->moe_layers.end());
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadMoeLayers(MoeLayerRule rule, const ConfigReader& r,
                           ModelInfo* info) {
  switch (rule) {
    case MoeLayerRule::kAll:
      AllLayers(info);
      return absl::OkStatus();
    case MoeLayerRule::kQwenSparseStep:
      return QwenLayers(r, info);
    case MoeLayerRule::kDeepseekFirstDenseAndFreq:
      return DeepseekLayers(r, info);
    case MoeLayerRule::kGlmFirstDense:
      return GlmLayers(r, info);
    case MoeLayerRule::kLlama4List:
      return Llama4Layers(r, info);
    case MoeLayerRule::kErnieInterval:
      return ErnieLayers(r, info);
    case MoeLayerRule::kNemotronPattern:
      return NemotronLayers(r, info);
    case MoeLayerRule::kArcticFrequency:
      return ArcticLayers(r, info);
    case MoeLayerRule::kJambaPeriod:
      return JambaLayers(r, info);
    case MoeLayerRule::kNumDenseLayers:
      return NumDenseLayers(r, info);
    case MoeLayerRule::kStepLayersEnum:
      return StepLayers(r, info);
  }
  return absl::InternalError("unknown MoE layer rule");
}

absl::StatusOr<std::optional<std::vector<int64_t>>> ListedMoeLayers(
    const ConfigReader& r, const std::vector<const char*>& keys,
    int64_t num_layers) {
  for (const char* key : keys) {
    if (!r.Present(key) || !r.raw().at(key).is_array()) continue;
    const json& v = r.raw().at(key);
    if (static_cast<int64_t>(v.size()) != num_layers) {
      return r.Error(
          key, absl::StrCat("lists ", v.size(),
                            " layers, not num_hidden_layers ", num_layers));
    }
    std::vector<int64_t> layers;
    for (int64_t l = 0; l < num_layers; ++l) {
      const json& x = v[l];
      const bool sparse = x == "sparse" || x == 1 || x == true;
      if (!sparse && x != "dense" && x != 0 && x != false) {
        return r.Error(key, absl::StrCat("entry ", l, " is ", x.dump(),
                                         ", not 'sparse' / 'dense' or 1 / 0"));
      }
      if (sparse) layers.push_back(l);
    }
    return layers;
  }
  return std::nullopt;
}

}  // namespace moe

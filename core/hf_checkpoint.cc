#include "core/hf_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/family_file.h"
#include "core/hf_quantised.h"
#include "core/mistral_params.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// compressed-tensors keeps a quantised linear's codes under
// `<stem>.weight_packed` where an unquantised one has `<stem>.weight`.
constexpr absl::string_view kPackedSuffix = ".weight_packed";

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A shard file name from the index must name a file inside the checkpoint.
bool SafeFileName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." &&
         name != "..";
}

bool RoleApplies(const MoeLayerConfig& c, WeightRole role) {
  switch (role) {
    case WeightRole::kExpertBias:
      return c.use_bias;
    case WeightRole::kSharedW1:
      return c.has_shared() && c.gated;
    case WeightRole::kSharedW3:
    case WeightRole::kSharedW2:
      return c.has_shared();
    case WeightRole::kSharedGate:
      return c.shared_gate;
    case WeightRole::kRouterBias:
      return c.router_bias;
    case WeightRole::kB1:
    case WeightRole::kB3:
    case WeightRole::kB2:
      return c.expert_bias;
    case WeightRole::kTid2Eid:
      return c.hash_routed();
    case WeightRole::kW1:
      return c.gated;
    case WeightRole::kLatentW1:
    case WeightRole::kLatentW2:
      return c.latent > 0;
    case WeightRole::kLatentB1:
    case WeightRole::kLatentB2:
      return c.latent > 0 && c.latent_bias;
    case WeightRole::kLatentNorm:
      return c.latent > 0 && c.latent_norm;
    case WeightRole::kGateScale:
      return c.router_prenorm;
    case WeightRole::kPerExpertScale:
      return c.per_expert_scale;
    case WeightRole::kExpertsInNorm:
    case WeightRole::kExpertsOutNorm:
      return c.branch_norms;
    case WeightRole::kSharedInNorm:
    case WeightRole::kSharedOutNorm:
      return c.branch_norms && c.has_shared();
    case WeightRole::kOutputBias:
      return c.output_bias;
    default:
      return true;
  }
}

bool IsRouted(WeightRole role) {
  return role == WeightRole::kW1 || role == WeightRole::kW3 ||
         role == WeightRole::kW2 || role == WeightRole::kB1 ||
         role == WeightRole::kB3 || role == WeightRole::kB2;
}

// DeepSeek-V3's FP8 checkpoints say how their weight_scale_inv blocks are
// cut: "quantization_config": {"quant_method": "fp8", "weight_block_size":
// [rows, cols], ...}. Other quantisation methods are not ours to read.
absl::Status ReadFp8BlockSize(const std::string& config,
                              const std::string& where, HfModelSpec* spec) {
  const json j = json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::OkStatus();
  const auto q = j.find("quantization_config");
  if (q == j.end() || !q->is_object()) return absl::OkStatus();
  const auto method = q->find("quant_method");
  if (method == q->end() || *method != "fp8") return absl::OkStatus();
  const auto block = q->find("weight_block_size");
  if (block == q->end()) return absl::OkStatus();
  if (!block->is_array() || block->size() != 2 ||
      !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
      (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": quantization_config.weight_block_size must be two "
                     "positive integers [rows, cols], got ",
                     block->dump()));
  }
  spec->fp8_block_rows = (*block)[0].get<int64_t>();
  spec->fp8_block_cols = (*block)[1].get<int64_t>();
  return absl::OkStatus();
}

// ModelOpt exports also describe their quantisation in hf_quant_config.json
// ({"quantization": {"quant_algo": "NVFP4", "group_size": 16,
// "exclude_modules": [...]}}), and some carry it only there. When config.json
// names no method, an NVFP4 one there makes the checkpoint's NVFP4 tensors
// readable (quant_method "modelopt"); any other algorithm is refused, naming
// it, rather than its tensors served as garbage. The excluded modules need no
// list: they have no weight_scale and are read as stored.
absl::Status ReadModelOptQuantConfig(const fs::path& root, HfModelSpec* spec) {
  const fs::path path = root / "hf_quant_config.json";
  std::error_code ec;
  if (!spec->quant_method.empty() || !fs::exists(path, ec)) {
    return absl::OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(std::string text, ReadText(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto q = j.is_object() ? j.find("quantization") : j.end();
  if (j.is_discarded() || !j.is_object() || q == j.end() || !q->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": needs a 'quantization' object"));
  }
  const auto algo = q->find("quant_algo");
  if (algo == q->end() || algo->is_null()) return absl::OkStatus();
  const auto group = q->find("group_size");
  if (*algo != "NVFP4" ||
      (group != q->end() && !group->is_null() && *group != 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path.string(), ": quantization ", q->dump(),
        " is not supported (supported: quant_algo NVFP4, group_size 16)"));
  }
  spec->quant_method = "modelopt";
  return absl::OkStatus();
}

// Copies the role's [out, in] weight out of a fused x·W tensor: w[o][i] =
// src[i][col0 + o * step], in tiles so that both sides stay in cache.
template <typename T>
void GatherTransposed(const T* src, int64_t in, int64_t cols, int64_t col0,
                      int64_t step, int64_t out, T* dst) {
  constexpr int64_t kTile = 64;
  for (int64_t o0 = 0; o0 < out; o0 += kTile) {
    const int64_t o1 = std::min(out, o0 + kTile);
    for (int64_t i0 = 0; i0 < in; i0 += kTile) {
      const int64_t i1 = std::min(in, i0 + kTile);
      for (int64_t i = i0; i < i1; ++i) {
        const T* row = src + i * cols + col0;
        for (int64_t o = o0; o < o1; ++o) dst[o * in + i] = row[o * step];
      }
    }
  }
}

}  // namespace

absl::StatusOr<WeightTensor> HfCheckpoint::SliceFused(
    const HfTensorLocation& loc, const TensorRef& ref) const {
  const auto& entry = *ref.entry;
  const std::string where = absl::StrCat(ref.file, ": ", loc.name);
  // A tensor stored with merged axes is read through its fused view.
  const std::vector<int64_t>& stored =
      loc.stored_shape.empty() ? loc.fused_shape : loc.stored_shape;
  if (entry.shape != stored) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape ", ShapeString(entry.shape), ", expected ",
                     ShapeString(stored), " (", HfFamilyName(spec_.family),
                     " fused experts)"));
  }
  const size_t es = DTypeSize(entry.dtype);
  if (!IsFloatingPoint(entry.dtype) || (es != 2 && es != 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", DTypeName(entry.dtype), " is not f32, bf16 or f16"));
  }
  WeightTensor t;
  t.name = where + absl::StrCat(" (expert ", loc.expert, ")");
  t.dtype = entry.dtype;
  if (loc.linear && loc.col_step == 1) {
    // Packed nn.Linear weights [E, C, in]: the role's rows of one expert are
    // contiguous, so they are read in place like a per-expert tensor.
    const int64_t rows = loc.fused_shape[1], in = loc.fused_shape[2];
    t.shape = {loc.out, in};
    t.data = ref.data + (loc.expert * rows + loc.col0) * in * es;
    return t;
  }
  if (loc.linear) {
    return absl::InternalError(
        absl::StrCat(where, ": a strided packed slice is not supported"));
  }
  // A fused bias [E, C] is one row per expert.
  const bool bias = loc.fused_shape.size() == 2;
  const int64_t in = bias ? 1 : loc.fused_shape[1];
  const int64_t cols = loc.fused_shape.back();
  // One expert's role at a time, packed and dropped by the loader: the
  // fused tensor itself stays a view of the mapped file.
  t.shape =
      bias ? std::vector<int64_t>{loc.out} : std::vector<int64_t>{loc.out, in};
  t.owned.resize(static_cast<size_t>(loc.out * in) * es);
  const std::byte* base = ref.data + loc.expert * in * cols * es;
  if (es == 2) {
    GatherTransposed(reinterpret_cast<const uint16_t*>(base), in, cols,
                     loc.col0, loc.col_step, loc.out,
                     reinterpret_cast<uint16_t*>(t.owned.data()));
  } else {
    GatherTransposed(reinterpret_cast<const uint32_t*>(base), in, cols,
                     loc.col0, loc.col_step, loc.out,
                     reinterpret_cast<uint32_t*>(t.owned.data()));
  }
  t.data = t.owned.data();
  return t;
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(
    const std::string& dir) {
  std::unique_ptr<HfCheckpoint> ckpt(new HfCheckpoint());
  ckpt->dir_ = dir;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": not a checkpoint directory"));
  }
  // config.json wins where both are present (README, "Mistral's own
  // layout"): Mistral's Hugging Face repositories carry params.json and its
  // consolidated shards beside the transformers ones.
  const bool hf = fs::exists(root / kHfConfigFile, ec);
  const bool mistral = !hf && fs::exists(root / kMistralConfigFile, ec);
  if (!hf && !mistral) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no ", kHfConfigFile, " (Hugging Face) nor ",
                     kMistralConfigFile, " (Mistral's own layout)"));
  }
  const fs::path config_path = root / (hf ? kHfConfigFile : kMistralConfigFile);
  MOE_ASSIGN_OR_RETURN(std::string config, ReadText(config_path));
  if (hf) {
    MOE_ASSIGN_OR_RETURN(ckpt->spec_,
                         ParseHfConfig(config, config_path.string()));
    MOE_RETURN_IF_ERROR(
        ReadFp8BlockSize(config, config_path.string(), &ckpt->spec_));
    MOE_RETURN_IF_ERROR(ReadModelOptQuantConfig(root, &ckpt->spec_));
  } else {
    MOE_ASSIGN_OR_RETURN(ckpt->spec_,
                         ParseMistralParams(config, config_path.string()));
  }
  ckpt->spec_.info.source = dir;
  // Mistral's shards are consolidated.safetensors or
  // consolidated-0000N-of-0000M.safetensors, indexed (when at all) by
  // consolidated.safetensors.index.json; other safetensors beside them are
  // the transformers copy, not read.
  MOE_RETURN_IF_ERROR(
      ckpt->ReadWeightMap(hf ? "model.safetensors.index.json"
                             : "consolidated.safetensors.index.json",
                          hf ? "" : "consolidated"));
  MOE_RETURN_IF_ERROR(ckpt->DetectExpertLayout());
  MOE_RETURN_IF_ERROR(ckpt->CheckLatentWidth());
  return ckpt;
}

absl::Status HfCheckpoint::ReadWeightMap(const std::string& index_name,
                                         const std::string& shard_prefix) {
  const fs::path root(dir_);
  const fs::path index_path = root / index_name;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    MOE_ASSIGN_OR_RETURN(std::string text, ReadText(index_path));
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": needs a 'weight_map' object"));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string() || !SafeFileName(it.value())) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": weight_map entry '", it.key(),
                         "' must name a file in the checkpoint directory"));
      }
      weight_map_[it.key()] = it.value().get<std::string>();
    }
    return absl::OkStatus();
  }
  // Unsharded (or sharded without an index): read every file's header.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" &&
        absl::StartsWith(name, shard_prefix)) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": no ", shard_prefix,
                                            "*.safetensors files and no ",
                                            index_name));
  }
  for (const auto& name : names) {
    MOE_ASSIGN_OR_RETURN(const SafetensorsFile* f, OpenFile(name));
    for (const auto& t : f->header().tensors) {
      weight_map_.emplace(t.name, name);
    }
  }
  return absl::OkStatus();
}

absl::Status HfCheckpoint::CheckLatentWidth() const {
  const ModelInfo& info = spec_.info;
  for (const int64_t layer : info.moe_layers) {
    const MoeLayerConfig& c = info.LayerConfig(layer);
    if (c.latent <= 0) continue;
    std::string name =
        HfLocate(spec_.family, c, layer, WeightRole::kLatentW1, 0).name;
    // A projection kept as compressed-tensors code pairs still has the
    // latent width as its rows; a missing one is named when it is read.
    if (std::optional<std::string> stem = CompressedStem(name)) {
      name = absl::StrCat(*stem, kPackedSuffix);
    }
    if (weight_map_.count(name) == 0) continue;
    MOE_ASSIGN_OR_RETURN(TensorRef ref, Find(name));
    const std::vector<int64_t>& shape = ref.entry->shape;
    if (!shape.empty() && shape[0] == c.latent) continue;
    const std::string key =
        spec_.latent_key.empty()
            ? std::string("the latent width")
            : absl::StrCat("config key '", spec_.latent_key, "'");
    std::vector<int64_t> expected = shape;
    if (expected.empty()) expected.push_back(0);
    expected[0] = c.latent;
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, ": ", key, " is ", c.latent, ", but ", ref.file, ": ", name,
        " is ", ShapeString(shape), " where its rows are the latent width: ",
        "expected ", ShapeString(expected), ", found latent width ",
        shape.empty() ? 0 : shape[0]));
  }
  return absl::OkStatus();
}

absl::Status HfCheckpoint::DetectExpertLayout() {
  const ModelInfo& info = spec_.info;
  // Mistral's layout is the config file's, not the tensors'.
  if (info.moe_layers.empty() ||
      spec_.layout == HfExpertLayout::kConsolidated) {
    return absl::OkStatus();
  }
  const int64_t layer = info.moe_layers.front();
  const MoeLayerConfig& c = info.LayerConfig(layer);
  const HfTensorLocation per_expert =
      HfLocate(spec_.family, c, layer, WeightRole::kW1, 0);
  const HfTensorLocation packed = HfLocate(
      spec_.family, c, layer, WeightRole::kW1, 0, HfExpertLayout::kPacked);
  // Families with a single layout (fused x·W, DeepSeek-V4) read as always.
  if (!packed.linear || weight_map_.count(per_expert.name) > 0) {
    return absl::OkStatus();
  }
  if (weight_map_.count(packed.name) > 0) {
    spec_.layout = HfExpertLayout::kPacked;
    return absl::OkStatus();
  }
  return NamedByFamilyFile(
      absl::NotFoundError(
          absl::StrCat(dir_, ": checkpoint has no tensor '", per_expert.name,
                       "' (one tensor per expert) nor '", packed.name,
                       "' (transformers v5 packed experts, ",
                       ShapeString(packed.fused_shape), ")")),
      WeightRole::kW1);
}

absl::StatusOr<const SafetensorsFile*> HfCheckpoint::OpenFile(
    const std::string& file) const {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(file);
  if (it != files_.end()) return it->second.get();
  MOE_ASSIGN_OR_RETURN(auto f,
                       SafetensorsFile::Open((fs::path(dir_) / file).string()));
  const SafetensorsFile* raw = f.get();
  files_[file] = std::move(f);
  return raw;
}

absl::StatusOr<TensorRef> HfCheckpoint::Find(const std::string& tensor) const {
  auto it = weight_map_.find(tensor);
  if (it == weight_map_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": checkpoint has no tensor '", tensor, "'"));
  }
  MOE_ASSIGN_OR_RETURN(const SafetensorsFile* f, OpenFile(it->second));
  return f->Get(tensor);
}

absl::Status HfCheckpoint::AttachBlockScales(const TensorRef& weight,
                                             const TensorRef& scale,
                                             WeightTensor* t) const {
  const auto& we = *weight.entry;
  if (we.shape.size() != 2) {
    return absl::InvalidArgumentError(t->name + ": FP8 weight must be 2-D");
  }
  const int64_t br = spec_.fp8_block_rows, bc = spec_.fp8_block_cols;
  const std::vector<int64_t> want_scale = {(we.shape[0] + br - 1) / br,
                                           (we.shape[1] + bc - 1) / bc};
  MOE_ASSIGN_OR_RETURN(t->block_scale, TensorToF32(scale, want_scale));
  t->block_rows = br;
  t->block_cols = bc;
  return absl::OkStatus();
}

absl::Status HfCheckpoint::NamedByFamilyFile(const absl::Status& missing,
                                             WeightRole role) const {
  const std::string file = FamilySourceFile(spec_.family);
  if (file.empty()) return missing;
  return absl::Status(
      missing.code(),
      absl::StrCat(
          missing.message(), " (the name template of role ",
          WeightRoleName(role), " in field 'names.",
          spec_.layout == HfExpertLayout::kPacked ? "packed" : "per_expert",
          "' of family file ", file, ")"));
}

absl::StatusOr<WeightTensor> HfCheckpoint::Get(int64_t layer, WeightRole role,
                                               int64_t expert) const {
  if (!spec_.info.HasLayer(layer)) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": layer ", layer, " is not an MoE layer"));
  }
  // A hash layer's tid2eid, a top-k layer's correction bias.
  const MoeLayerConfig& c = spec_.info.LayerConfig(layer);
  if (!RoleApplies(c, role)) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": ", HfFamilyName(spec_.family), " layer ", layer,
                     " has no ", WeightRoleName(role), " tensor"));
  }
  if (IsRouted(role) && (expert < 0 || expert >= c.num_experts)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, ": expert ", expert, " is outside [0, ", c.num_experts, ")"));
  }
  // ERNIE-4.5-VL as released names a layer's vision experts beside its
  // text ones: the vision router is the text router's name plus "_1",
  // vision expert e is expert E + e, and the correction bias [2, E] holds
  // the text row, then the vision row; the shared experts are the layer's.
  const std::optional<int64_t> owner = spec_.info.VisionOwner(layer);
  const bool modal = !spec_.info.vision_layers.empty();
  HfTensorLocation loc = HfLocate(
      spec_.family, c, owner.value_or(layer), role,
      owner.has_value() && IsRouted(role) ? expert + c.num_experts : expert,
      spec_.layout);
  if (owner.has_value() && role == WeightRole::kGate) loc.name += "_1";
  const std::string& name = loc.name;
  // gpt-oss as released: the fused weight's MXFP4 *_blocks/*_scales.
  if (loc.fused && weight_map_.count(name + "_blocks") > 0) {
    return GptOssMxfp4(loc);
  }
  // Kimi K3 as released: compressed-tensors MXFP4 weight_packed /
  // weight_scale in place of `.weight`.
  if (std::optional<std::string> packed = CompressedStem(name)) {
    return CompressedMxfp4(ExpectedShape(c, role), *packed);
  }
  const bool dot_weight = absl::EndsWith(name, ".weight");
  const std::string stem =
      dot_weight ? name.substr(0, name.size() - 7) : std::string();
  const bool mlp_linear = role == WeightRole::kW3 || role == WeightRole::kW2 ||
                          role == WeightRole::kSharedW3 ||
                          role == WeightRole::kSharedW2;
  if (spec_.family == HfFamily::kNemotronH && dot_weight && mlp_linear) {
    MOE_RETURN_IF_ERROR(NoUnservedBias(stem + ".bias"));
  }
  absl::StatusOr<TensorRef> found = Find(name);
  if (!found.ok()) return NamedByFamilyFile(found.status(), role);
  const TensorRef& ref = *found;
  if (loc.fused) return SliceFused(loc, ref);
  WeightTensor t;
  t.name = absl::StrCat(ref.file, ": ", name);
  t.dtype = ref.entry->dtype;
  t.shape = ref.entry->shape;
  t.data = ref.data;
  if (modal && (role == WeightRole::kGate || role == WeightRole::kExpertBias)) {
    return ModalityTensor(c, role, owner.has_value() ? 1 : 0, std::move(t));
  }
  if (spec_.family == HfFamily::kDeepseekV4 &&
      absl::EndsWith(name, ".weight")) {
    const std::string v4_scale = name.substr(0, name.size() - 7) + ".scale";
    if (weight_map_.count(v4_scale) > 0 || ref.entry->dtype == DType::kI8) {
      return DeepseekV4Quantised(ExpectedShape(c, role), ref, v4_scale,
                                 std::move(t));
    }
  }
  // ModelOpt NVFP4: a quantised linear's U8 code pairs come with its
  // `weight_scale` (E4M3 per 16) and `weight_scale_2` (fp32 global); the
  // modules its `ignore` list names have neither and are read as stored.
  if (spec_.quant_method == "modelopt" && absl::EndsWith(name, ".weight") &&
      weight_map_.count(name + "_scale") > 0) {
    const std::vector<int64_t> logical = ExpectedShape(c, role);
    if (logical.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": an NVFP4 weight must be a 2-D linear"));
    }
    const std::string names[3] = {name, name + "_scale", name + "_scale_2"};
    if (weight_map_.count(names[2]) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": NVFP4 weight has '", names[1],
                       "' but no global scale '", names[2], "' (F32 scalar)"));
    }
    MOE_ASSIGN_OR_RETURN(TensorRef scale, Find(names[1]));
    MOE_ASSIGN_OR_RETURN(TensorRef scale_2, Find(names[2]));
    return ReadNvfp4(ref, scale, scale_2, names, logical[0], logical[1]);
  }
  const bool fp8 =
      ref.entry->dtype == DType::kF8E4M3 || ref.entry->dtype == DType::kF8E5M2;
  const std::string scale_name = name + "_scale_inv";
  if (fp8 && weight_map_.count(scale_name) > 0) {
    MOE_ASSIGN_OR_RETURN(TensorRef scale, Find(scale_name));
    MOE_RETURN_IF_ERROR(AttachBlockScales(ref, scale, &t));
  }
  return t;
}

absl::StatusOr<WeightTensor> HfCheckpoint::ModalityTensor(
    const MoeLayerConfig& c, WeightRole role, int modality,
    WeightTensor t) const {
  const int64_t E = c.num_experts, H = c.hidden;
  if (role == WeightRole::kExpertBias && t.shape.size() == 2 &&
      t.shape[0] == 2 && t.shape[1] == E) {
    // One row per modality: this expert set's.
    t.shape = {E};
    t.data += modality * E * DTypeSize(t.dtype);
    t.name += modality == 0 ? " (text row)" : " (vision row)";
    return t;
  }
  if (role == WeightRole::kExpertBias) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": shape ", ShapeString(t.shape), ", expected ",
        ShapeString({2, E}), " (the text and the vision experts' rows)"));
  }
  if (role == WeightRole::kGate && t.shape == std::vector<int64_t>{H, E} &&
      H != E) {
    // The release stores its routers as x·W [H, E] (vLLM reads them
    // transposed); the engine's gate is [E, H].
    const size_t es = DTypeSize(t.dtype);
    std::vector<std::byte> owned(static_cast<size_t>(H * E) * es);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < E; ++e) {
        std::memcpy(owned.data() + (e * H + h) * es, t.data + (h * E + e) * es,
                    es);
      }
    }
    t.owned = std::move(owned);
    t.data = t.owned.data();
    t.shape = {E, H};
    t.name += " (stored [H, E], read transposed)";
  }
  return t;
}

absl::StatusOr<WeightTensor> HfCheckpoint::GptOssMxfp4(
    const HfTensorLocation& loc) const {
  // The fused x·W tensor [E, in, C] is stored as C rows of `in` values per
  // expert: blocks [E, C, in/32, 16], scales [E, C, in/32]. The role's
  // output o is row col0 + o * col_step (gate_up interleaves gate and up).
  const int64_t E = loc.fused_shape[0], in = loc.fused_shape[1],
                C = loc.fused_shape[2];
  const std::string blocks_name = loc.name + "_blocks";
  const std::string scales_name = loc.name + "_scales";
  if (in % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": ", blocks_name,
                                                   ": MXFP4 input width ", in,
                                                   " is not a multiple of 32"));
  }
  MOE_ASSIGN_OR_RETURN(TensorRef blocks, Find(blocks_name));
  MOE_ASSIGN_OR_RETURN(TensorRef scales, Find(scales_name));
  MOE_RETURN_IF_ERROR(
      CheckQuantTensor(blocks, blocks_name, {DType::kU8}, {E, C, in / 32, 16}));
  MOE_RETURN_IF_ERROR(CheckQuantTensor(
      scales, scales_name, {DType::kU8, DType::kF8E8M0}, {E, C, in / 32}));
  return GatherMxfp4Rows(absl::StrCat(blocks.file, ": ", blocks_name,
                                      " (expert ", loc.expert, ")"),
                         blocks, scales, scales_name, loc.expert * C + loc.col0,
                         loc.col_step, loc.out, in);
}

absl::StatusOr<WeightTensor> HfCheckpoint::DeepseekV4Quantised(
    const std::vector<int64_t>& logical, const TensorRef& ref,
    const std::string& scale_name, WeightTensor t) const {
  const std::string& name = ref.entry->name;
  if (logical.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": a quantised weight must be a 2-D linear"));
  }
  const int64_t out = logical[0], in = logical[1];
  if (weight_map_.count(scale_name) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": dtype ", DTypeName(ref.entry->dtype),
        " (fp4 code pairs) needs its E8M0 scale tensor '", scale_name, "'"));
  }
  MOE_ASSIGN_OR_RETURN(TensorRef scale, Find(scale_name));
  if (ref.entry->dtype == DType::kI8) {
    // fp4 (MXFP4): [out, in/2] code pairs, scale [out, in/32].
    if (in % 32 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": fp4 input width ", in,
                       " is not a multiple of 32 (one E8M0 scale per 32)"));
    }
    MOE_RETURN_IF_ERROR(
        CheckQuantTensor(ref, name, {DType::kI8}, {out, in / 2}));
    MOE_RETURN_IF_ERROR(
        CheckQuantTensor(scale, scale_name, {DType::kF8E8M0}, {out, in / 32}));
    return GatherMxfp4Rows(t.name, ref, scale, scale_name, 0, 1, out, in);
  }
  if (ref.entry->dtype == DType::kF8E4M3) {
    // FP8 with one E8M0 (ue8m0) scale per weight_block_size block.
    MOE_RETURN_IF_ERROR(
        CheckQuantTensor(ref, name, {DType::kF8E4M3}, {out, in}));
    const int64_t br = spec_.fp8_block_rows, bc = spec_.fp8_block_cols;
    MOE_ASSIGN_OR_RETURN(
        t.block_scale, E8M0Factors(scale, scale_name,
                                   {(out + br - 1) / br, (in + bc - 1) / bc}));
    t.block_rows = br;
    t.block_cols = bc;
    return t;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      t.name, ": dtype ", DTypeName(ref.entry->dtype), " with a '", scale_name,
      "' tensor; expected I8 (fp4) or F8_E4M3 (fp8) weights"));
}

std::optional<std::string> HfCheckpoint::CompressedStem(
    const std::string& name) const {
  if (!absl::EndsWith(name, ".weight") || weight_map_.count(name) > 0) {
    return std::nullopt;
  }
  std::string stem = name.substr(0, name.size() - 7);
  if (weight_map_.count(absl::StrCat(stem, kPackedSuffix)) == 0)
    return std::nullopt;
  return stem;
}

absl::StatusOr<WeightTensor> HfCheckpoint::CompressedMxfp4(
    const std::vector<int64_t>& logical, const std::string& stem) const {
  const std::string packed_name = absl::StrCat(stem, kPackedSuffix);
  const std::string scale_name = stem + ".weight_scale";
  if (logical.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", packed_name,
                     ": only a 2-D linear can be MXFP4 (compressed-tensors)"));
  }
  const int64_t out = logical[0], in = logical[1];
  if (in % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": ", packed_name, ": MXFP4 input width ", in,
                     " is not a multiple of 32 (one E8M0 scale per 32)"));
  }
  if (weight_map_.count(scale_name) == 0) {
    return absl::NotFoundError(absl::StrCat(
        dir_, ": ", packed_name, " needs its E8M0 scale tensor '", scale_name,
        "' [", out, ", ", in / 32, "] (compressed-tensors mxfp4)"));
  }
  MOE_ASSIGN_OR_RETURN(TensorRef packed, Find(packed_name));
  MOE_ASSIGN_OR_RETURN(TensorRef scale, Find(scale_name));
  MOE_RETURN_IF_ERROR(
      CheckQuantTensor(packed, packed_name, {DType::kU8}, {out, in / 2}));
  MOE_RETURN_IF_ERROR(CheckQuantTensor(
      scale, scale_name, {DType::kU8, DType::kF8E8M0}, {out, in / 32}));
  return GatherMxfp4Rows(absl::StrCat(packed.file, ": ", packed_name), packed,
                         scale, scale_name, 0, 1, out, in);
}

absl::Status HfCheckpoint::NoUnservedBias(const std::string& bias) const {
  if (weight_map_.count(bias) == 0) return absl::OkStatus();
  // Nemotron's mlp_bias also puts biases on the experts' and the shared
  // expert's up / down projections, which the engine has no role for:
  // zeros change nothing, anything else would be served wrong.
  MOE_ASSIGN_OR_RETURN(TensorRef ref, Find(bias));
  MOE_ASSIGN_OR_RETURN(std::vector<float> v,
                       TensorToF32(ref, ref.entry->shape));
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0.0f) {
      return absl::UnimplementedError(absl::StrCat(
          ref.file, ": ", bias, ": element ", i, " is ", v[i],
          "; biases on nemotron_h expert / shared-expert projections "
          "(mlp_bias) are not supported, only on fc1/fc2_latent_proj"));
    }
  }
  return absl::OkStatus();
}

}  // namespace moe

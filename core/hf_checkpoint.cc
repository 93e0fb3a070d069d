#include "core/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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
    default:
      return true;
  }
}

bool IsRouted(WeightRole role) {
  return role == WeightRole::kW1 || role == WeightRole::kW3 ||
         role == WeightRole::kW2 || role == WeightRole::kB1 ||
         role == WeightRole::kB3 || role == WeightRole::kB2;
}

// Quantised expert formats whose decoding is not in this loader yet
// (gpt-oss's MXFP4 *_blocks/*_scales, DeepSeek-V4's fp4/fp8 weights with
// `.scale`): refused at open, naming the first such tensor, rather than
// read as if unquantised.
absl::Status RefuseQuantisedTensors(
    const HfModelSpec& spec,
    const std::unordered_map<std::string, std::string>& weight_map,
    const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& [name, file] : weight_map) {
    const bool mxfp4 =
        absl::EndsWith(name, "_blocks") ||
        (spec.family == HfFamily::kGptOss && absl::EndsWith(name, "_scales"));
    const bool v4_scale = spec.family == HfFamily::kDeepseekV4 &&
                          absl::StartsWith(name, "layers.") &&
                          absl::EndsWith(name, ".scale");
    if (mxfp4 || v4_scale) found.push_back(name);
  }
  if (found.empty()) return absl::OkStatus();
  std::sort(found.begin(), found.end());
  const std::string what =
      spec.family == HfFamily::kDeepseekV4
          ? "DeepSeek-V4 quantised weights (fp4 experts / fp8 linears with "
            "E8M0 .scale)"
          : "MXFP4 expert blocks";
  return absl::UnimplementedError(absl::StrCat(
      dir, ": tensor '", found.front(), "' holds ", what,
      spec.quant_method.empty()
          ? ""
          : absl::StrCat(" (quantization_config.quant_method '",
                         spec.quant_method, "')"),
      ", which this loader does not read yet; give a dequantised bf16 "
      "checkpoint"));
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
  if (entry.shape != loc.fused_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape ", ShapeString(entry.shape), ", expected ",
                     ShapeString(loc.fused_shape), " (",
                     HfFamilyName(spec_.family), " fused experts)"));
  }
  const size_t es = DTypeSize(entry.dtype);
  if (!IsFloatingPoint(entry.dtype) || (es != 2 && es != 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", DTypeName(entry.dtype), " is not f32, bf16 or f16"));
  }
  // A fused bias [E, C] is one row per expert.
  const bool bias = loc.fused_shape.size() == 2;
  const int64_t in = bias ? 1 : loc.fused_shape[1];
  const int64_t cols = loc.fused_shape.back();
  // One expert's role at a time, packed and dropped by the loader: the
  // fused tensor itself stays a view of the mapped file.
  WeightTensor t;
  t.name = where + absl::StrCat(" (expert ", loc.expert, ")");
  t.dtype = entry.dtype;
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
  MOE_ASSIGN_OR_RETURN(std::string config, ReadText(root / "config.json"));
  MOE_ASSIGN_OR_RETURN(ckpt->spec_,
                       ParseHfConfig(config, (root / "config.json").string()));
  ckpt->spec_.info.source = dir;
  MOE_RETURN_IF_ERROR(
      ReadFp8BlockSize(config, (root / "config.json").string(), &ckpt->spec_));

  const fs::path index_path = root / "model.safetensors.index.json";
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
      ckpt->weight_map_[it.key()] = it.value().get<std::string>();
    }
  } else {
    // Unsharded (or sharded without an index): read every file's header.
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().extension() == ".safetensors") {
        names.push_back(entry.path().filename().string());
      }
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) {
      return absl::NotFoundError(absl::StrCat(dir,
                                              ": no *.safetensors files and no "
                                              "model.safetensors.index.json"));
    }
    for (const auto& name : names) {
      MOE_ASSIGN_OR_RETURN(const SafetensorsFile* f, ckpt->OpenFile(name));
      for (const auto& t : f->header().tensors) {
        ckpt->weight_map_.emplace(t.name, name);
      }
    }
  }
  MOE_RETURN_IF_ERROR(
      RefuseQuantisedTensors(ckpt->spec_, ckpt->weight_map_, dir));
  return ckpt;
}

absl::StatusOr<const SafetensorsFile*> HfCheckpoint::OpenFile(
    const std::string& file) const {
  std::lock_guard<std::mutex> lock(mu_);
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

absl::StatusOr<WeightTensor> HfCheckpoint::Get(int64_t layer, WeightRole role,
                                               int64_t expert) const {
  const MoeLayerConfig& c = spec_.info.layer;
  if (!spec_.info.HasLayer(layer)) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": layer ", layer, " is not an MoE layer"));
  }
  if (!RoleApplies(c, role)) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": ", HfFamilyName(spec_.family), " layer has no ",
                     WeightRoleName(role), " tensor"));
  }
  if (IsRouted(role) && (expert < 0 || expert >= c.num_experts)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir_, ": expert ", expert, " is outside [0, ", c.num_experts, ")"));
  }
  const HfTensorLocation loc = HfLocate(spec_.family, c, layer, role, expert);
  const std::string& name = loc.name;
  MOE_ASSIGN_OR_RETURN(TensorRef ref, Find(name));
  if (loc.fused) return SliceFused(loc, ref);
  WeightTensor t;
  t.name = absl::StrCat(ref.file, ": ", name);
  t.dtype = ref.entry->dtype;
  t.shape = ref.entry->shape;
  t.data = ref.data;
  const bool fp8 =
      ref.entry->dtype == DType::kF8E4M3 || ref.entry->dtype == DType::kF8E5M2;
  const std::string scale_name = name + "_scale_inv";
  if (fp8 && weight_map_.count(scale_name) > 0) {
    MOE_ASSIGN_OR_RETURN(TensorRef scale, Find(scale_name));
    MOE_RETURN_IF_ERROR(AttachBlockScales(ref, scale, &t));
  }
  return t;
}

}  // namespace moe

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

}  // namespace

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
  const std::string name = HfTensorName(spec_.family, layer, role, expert);
  MOE_ASSIGN_OR_RETURN(TensorRef ref, Find(name));
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

#include "tests/testutil/golden_case.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"

#ifndef MOE_GOLDEN_DIR
#define MOE_GOLDEN_DIR "tests/golden"
#endif

namespace moe::testing {
namespace {

namespace fs = std::filesystem;

absl::Status ReadOptional(const SafetensorsFile& f, const char* name,
                          std::vector<float>* out) {
  if (!f.Has(name)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(*out, f.ReadF32(name));
  return absl::OkStatus();
}

class GoldenSource : public ModelSource {
 public:
  GoldenSource(const GoldenCase& c, int64_t layer) : case_(c) {
    info_.family = "golden";
    info_.source = c.name;
    info_.num_layers = layer + 1;
    info_.moe_layers = {layer};
    info_.layer = c.config;
  }
  const ModelInfo& info() const override { return info_; }

  absl::StatusOr<WeightTensor> Get(int64_t layer, WeightRole role,
                                   int64_t expert) const override {
    if (!info_.HasLayer(layer)) {
      return absl::NotFoundError(absl::StrCat("no layer ", layer));
    }
    const MoeLayerConfig& c = case_.config;
    const std::vector<float>* src = nullptr;
    int64_t offset = 0;
    switch (role) {
      case WeightRole::kGate:
        src = &case_.gate;
        break;
      case WeightRole::kExpertBias:
        src = &case_.bias;
        break;
      case WeightRole::kW1:
        src = &case_.w1;
        offset = expert * c.inter * c.expert_width();
        break;
      case WeightRole::kW3:
        src = &case_.w3;
        offset = expert * c.inter * c.expert_width();
        break;
      case WeightRole::kW2:
        src = &case_.w2;
        offset = expert * c.inter * c.expert_width();
        break;
      case WeightRole::kSharedW1:
        src = &case_.sw1;
        break;
      case WeightRole::kSharedW3:
        src = &case_.sw3;
        break;
      case WeightRole::kSharedW2:
        src = &case_.sw2;
        break;
      case WeightRole::kSharedGate:
        src = &case_.sgate;
        break;
      case WeightRole::kRouterBias:
        src = &case_.router_bias;
        break;
      case WeightRole::kB1:
        src = &case_.b1;
        offset = expert * c.inter;
        break;
      case WeightRole::kB3:
        src = &case_.b3;
        offset = expert * c.inter;
        break;
      case WeightRole::kB2:
        src = &case_.b2;
        offset = expert * c.hidden;
        break;
      case WeightRole::kTid2Eid:
        break;
      case WeightRole::kLatentW1:
        src = &case_.latent_w1;
        break;
      case WeightRole::kLatentW2:
        src = &case_.latent_w2;
        break;
      case WeightRole::kLatentB1:
        src = &case_.latent_b1;
        break;
      case WeightRole::kLatentB2:
        src = &case_.latent_b2;
        break;
      case WeightRole::kLatentNorm:
        src = &case_.latent_norm;
        break;
      case WeightRole::kGateScale:
        src = &case_.gate_scale;
        break;
      case WeightRole::kPerExpertScale:
        src = &case_.per_expert_scale;
        break;
      case WeightRole::kExpertsInNorm:
        src = &case_.experts_in_norm;
        break;
      case WeightRole::kExpertsOutNorm:
        src = &case_.experts_out_norm;
        break;
      case WeightRole::kSharedInNorm:
        src = &case_.shared_in_norm;
        break;
      case WeightRole::kSharedOutNorm:
        src = &case_.shared_out_norm;
        break;
      case WeightRole::kOutputBias:
        src = &case_.output_bias;
        break;
    }
    WeightTensor t;
    t.name = absl::StrCat(case_.name, ":", WeightRoleName(role));
    t.dtype = DType::kF32;
    t.shape = ExpectedShape(c, role);
    if (role == WeightRole::kTid2Eid) {
      if (case_.tid2eid.empty()) return absl::NotFoundError(t.name + " absent");
      t.dtype = DType::kI64;
      t.data = reinterpret_cast<const std::byte*>(case_.tid2eid.data());
      return t;
    }
    if (src->empty()) return absl::NotFoundError(t.name + " is absent");
    t.data = reinterpret_cast<const std::byte*>(src->data() + offset);
    return t;
  }

 private:
  const GoldenCase& case_;
  ModelInfo info_;
};

}  // namespace

std::string GoldenDir() {
  if (const char* env = std::getenv("MOE_GOLDEN_DIR")) return env;
  return MOE_GOLDEN_DIR;
}

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(GoldenDir(), ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string NoGoldenFilesMessage() {
  return absl::StrCat("no golden cases (*.safetensors) in ", GoldenDir(),
                      ": restore the repository's tests/golden, or point "
                      "$MOE_GOLDEN_DIR at a copy");
}

std::vector<std::string> RequireGoldenFiles() {
  std::vector<std::string> files = GoldenFiles();
  if (files.empty()) ADD_FAILURE() << NoGoldenFilesMessage();
  return files;
}

std::vector<std::string> GoldenParams() {
  std::vector<std::string> files = GoldenFiles();
  if (files.empty()) files.push_back(kGoldenDirMissing);
  return files;
}

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& path) {
  if (path == kGoldenDirMissing) {
    return absl::NotFoundError(NoGoldenFilesMessage());
  }
  MOE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(path));
  GoldenCase c;
  c.name = fs::path(path).stem();
  auto cfg = f->metadata().find("config");
  if (cfg == f->metadata().end()) {
    return absl::InvalidArgumentError(path + ": no config metadata");
  }
  MOE_ASSIGN_OR_RETURN(c.config, ParseMoeLayerConfigJson(cfg->second));
  MOE_ASSIGN_OR_RETURN(auto x_ref, f->Get("x"));
  c.tokens = x_ref.entry->shape[0];
  MOE_ASSIGN_OR_RETURN(c.x, f->ReadF32("x"));
  MOE_ASSIGN_OR_RETURN(c.y, f->ReadF32("y"));
  MOE_ASSIGN_OR_RETURN(c.top_idx, f->ReadI64("top_idx"));
  MOE_ASSIGN_OR_RETURN(c.top_w, f->ReadF32("top_w"));
  MOE_ASSIGN_OR_RETURN(auto idx_ref, f->Get("top_idx"));
  c.top_shape = idx_ref.entry->shape;
  MOE_ASSIGN_OR_RETURN(c.gate, f->ReadF32("gate.weight"));
  if (c.config.gated) {
    MOE_ASSIGN_OR_RETURN(c.w1, f->ReadF32("experts.w1"));
  }
  MOE_ASSIGN_OR_RETURN(c.w3, f->ReadF32("experts.w3"));
  MOE_ASSIGN_OR_RETURN(c.w2, f->ReadF32("experts.w2"));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "gate.expert_bias", &c.bias));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "shared.w1", &c.sw1));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "shared.w3", &c.sw3));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "shared.w2", &c.sw2));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "shared.gate", &c.sgate));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "gate.bias", &c.router_bias));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "experts.b1", &c.b1));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "experts.b3", &c.b3));
  MOE_RETURN_IF_ERROR(ReadOptional(*f, "experts.b2", &c.b2));
  for (auto [name, dst] :
       std::initializer_list<std::pair<const char*, std::vector<float>*>>{
           {"latent.w1", &c.latent_w1},
           {"latent.w2", &c.latent_w2},
           {"latent.b1", &c.latent_b1},
           {"latent.b2", &c.latent_b2},
           {"latent.norm", &c.latent_norm},
           {"gate.scale", &c.gate_scale},
           {"gate.per_expert_scale", &c.per_expert_scale},
           {"experts.in_norm", &c.experts_in_norm},
           {"experts.out_norm", &c.experts_out_norm},
           {"shared.in_norm", &c.shared_in_norm},
           {"shared.out_norm", &c.shared_out_norm},
           {"output.bias", &c.output_bias}}) {
    MOE_RETURN_IF_ERROR(ReadOptional(*f, name, dst));
  }
  if (f->Has("gate.tid2eid")) {
    MOE_ASSIGN_OR_RETURN(c.tid2eid, f->ReadI64("gate.tid2eid"));
  }
  if (f->Has("token_ids")) {
    MOE_ASSIGN_OR_RETURN(c.token_ids, f->ReadI64("token_ids"));
  }
  return c;
}

std::unique_ptr<ModelSource> MakeGoldenSource(const GoldenCase& c,
                                              int64_t layer) {
  return std::make_unique<GoldenSource>(c, layer);
}

}  // namespace moe::testing

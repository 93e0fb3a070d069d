#include "tests/testutil/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/dtype.h"
#include "core/hf_config.h"
#include "core/safetensors.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kBlock = 128;

// Every expert matrix of a case: its tensor role, expert, and where its
// [rows, cols] values live in the case.
struct ExpertMatrix {
  WeightRole role;
  int64_t expert;  // -1 for the shared expert
  float* data;
  int64_t rows, cols;
};

std::vector<ExpertMatrix> ExpertMatrices(GoldenCase* c) {
  const MoeLayerConfig& k = c->config;
  // Routed experts are W wide (the latent width under LatentMoE); a
  // non-gated layer has no W1.
  const int64_t H = k.hidden, W = k.expert_width(), I = k.inter,
                S = k.shared_inter;
  std::vector<ExpertMatrix> m;
  for (int64_t e = 0; e < k.num_experts; ++e) {
    if (k.gated) {
      m.push_back({WeightRole::kW1, e, c->w1.data() + e * I * W, I, W});
    }
    m.push_back({WeightRole::kW3, e, c->w3.data() + e * I * W, I, W});
    m.push_back({WeightRole::kW2, e, c->w2.data() + e * W * I, W, I});
  }
  if (k.has_shared()) {
    if (k.gated) m.push_back({WeightRole::kSharedW1, -1, c->sw1.data(), S, H});
    m.push_back({WeightRole::kSharedW3, -1, c->sw3.data(), S, H});
    m.push_back({WeightRole::kSharedW2, -1, c->sw2.data(), H, S});
  }
  return m;
}

}  // namespace

void QuantiseFp8Blocks(const float* w, int64_t rows, int64_t cols,
                       std::vector<uint8_t>* codes,
                       std::vector<float>* scales) {
  const int64_t rb = (rows + kBlock - 1) / kBlock;
  const int64_t cb = (cols + kBlock - 1) / kBlock;
  codes->assign(rows * cols, 0);
  scales->assign(rb * cb, 1.0f);
  for (int64_t bi = 0; bi < rb; ++bi) {
    for (int64_t bj = 0; bj < cb; ++bj) {
      const int64_t i1 = std::min(rows, (bi + 1) * kBlock);
      const int64_t j1 = std::min(cols, (bj + 1) * kBlock);
      float amax = 0;
      for (int64_t i = bi * kBlock; i < i1; ++i) {
        for (int64_t j = bj * kBlock; j < j1; ++j) {
          amax = std::max(amax, std::fabs(w[i * cols + j]));
        }
      }
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      (*scales)[bi * cb + bj] = s;
      for (int64_t i = bi * kBlock; i < i1; ++i) {
        for (int64_t j = bj * kBlock; j < j1; ++j) {
          (*codes)[i * cols + j] = F32ToF8E4M3(w[i * cols + j] / s);
        }
      }
    }
  }
}

void RoundTripExpertsThroughFp8(GoldenCase* c) {
  for (const ExpertMatrix& m : ExpertMatrices(c)) {
    std::vector<uint8_t> q;
    std::vector<float> s;
    QuantiseFp8Blocks(m.data, m.rows, m.cols, &q, &s);
    const int64_t cb = (m.cols + kBlock - 1) / kBlock;
    for (int64_t i = 0; i < m.rows; ++i) {
      for (int64_t j = 0; j < m.cols; ++j) {
        m.data[i * m.cols + j] =
            F8E4M3ToF32(q[i * m.cols + j]) * s[(i / kBlock) * cb + j / kBlock];
      }
    }
  }
  RunReferenceMoe(*c);
}

absl::Status WriteFp8Checkpoint(const GoldenCase& c, int64_t layer,
                                const std::string& dir) {
  HfWriteOptions o;
  o.family = HfFamily::kDeepseekV3;
  o.layer = layer;
  o.shards = 1;
  o.write_index = false;
  MOE_RETURN_IF_ERROR(WriteHfCheckpoint(c, o, dir));
  // Replace the experts of `layer` in the file by FP8 codes and scales.
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  GoldenCase copy = c;
  std::vector<ExpertMatrix> experts = ExpertMatrices(&copy);
  SafetensorsWriter out;
  {
    MOE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(file));
    for (const auto& t : f->header().tensors) {
      MOE_ASSIGN_OR_RETURN(TensorRef ref, f->Get(t.name));
      const auto m = std::find_if(
          experts.begin(), experts.end(), [&](const ExpertMatrix& e) {
            return t.name ==
                   HfTensorName(HfFamily::kDeepseekV3, layer, e.role, e.expert);
          });
      if (m == experts.end()) {
        out.Add(t.name, t.dtype, t.shape, ref.data, ref.nbytes());
        continue;
      }
      std::vector<uint8_t> q;
      std::vector<float> s;
      QuantiseFp8Blocks(m->data, m->rows, m->cols, &q, &s);
      out.Add(t.name, DType::kF8E4M3, {m->rows, m->cols}, q.data(), q.size());
      out.AddF32(
          t.name + "_scale_inv",
          {(m->rows + kBlock - 1) / kBlock, (m->cols + kBlock - 1) / kBlock},
          s);
    }
  }
  MOE_RETURN_IF_ERROR(out.WriteFile(file));
  // config.json gains DeepSeek-V3's quantization_config.
  const fs::path config = fs::path(dir) / "config.json";
  std::stringstream text;
  text << std::ifstream(config).rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str());
  j["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"weight_block_size", {kBlock, kBlock}}};
  std::ofstream(config) << j.dump(2);
  return absl::OkStatus();
}

}  // namespace moe::testing

// Golden MoE cases (tests/golden/*.safetensors): loading, and a ModelSource
// that serves a case's weights as MoE layer 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "core/safetensors.h"

namespace moe::testing {

// The golden directory: $MOE_GOLDEN_DIR, else the repository's tests/golden
// (an absolute path compiled in by tests/CMakeLists.txt).
std::string GoldenDir();
// Every *.safetensors in GoldenDir(), sorted. Empty if the directory is gone.
std::vector<std::string> GoldenFiles();

struct GoldenCase {
  std::string name;
  MoeLayerConfig config;
  int64_t tokens = 0;
  std::vector<float> x, y;
  std::vector<int64_t> top_idx;  // [N, k], or [E, C] for expert choice
  std::vector<float> top_w;
  std::vector<int64_t> top_shape;
  // The weights, fp32, in golden layout.
  std::vector<float> gate, bias, w1, w3, w2, sw1, sw3, sw2, sgate;
};

absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& path);

// A ModelSource over a golden case's weights (layer `layer`, default 0).
std::unique_ptr<ModelSource> MakeGoldenSource(const GoldenCase& c,
                                              int64_t layer = 0);

}  // namespace moe::testing

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

// Says that GoldenDir() holds no golden cases, naming it.
std::string NoGoldenFilesMessage();

// GoldenFiles(), after adding a test failure that names GoldenDir() when
// there are none: for a test that loops over the cases.
std::vector<std::string> RequireGoldenFiles();

// The one parameter GoldenParams() gives when GoldenDir() has no cases.
// LoadGoldenCase(kGoldenDirMissing) fails with NoGoldenFilesMessage().
inline constexpr char kGoldenDirMissing[] = "GoldenDirMissing";

// GoldenFiles(), or {kGoldenDirMissing} when there are none: the values for
// INSTANTIATE_TEST_SUITE_P over the golden cases. A missing or empty golden
// folder is then one failing case that names the folder, not a suite without
// cases (which gtest lets pass under GTEST_ALLOW_UNINSTANTIATED_... or in
// versions before 1.11).
std::vector<std::string> GoldenParams();

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
  // 2026: gate.bias [E], experts.b1/b3 [E, I], experts.b2 [E, H];
  // gate.tid2eid [V, k] and token_ids [N] of a hash-routed case.
  std::vector<float> router_bias, b1, b3, b2;
  std::vector<int64_t> tid2eid, token_ids;
  // 2026b/c: latent.w1 [Lt, H], latent.w2 [H, Lt], latent.b1 [Lt],
  // latent.b2 [H], latent.norm [Lt]; gate.scale [H], gate.per_expert_scale
  // [E]; experts.in_norm / out_norm and shared.in_norm / out_norm [H]. A
  // non-gated case has no w1 or sw1.
  std::vector<float> latent_w1, latent_w2, latent_b1, latent_b2, latent_norm;
  std::vector<float> gate_scale, per_expert_scale;
  // 2026d: output.bias [H] (output_bias). With zero experts the gate and
  // both biases have E + Z rows.
  std::vector<float> output_bias;
  std::vector<float> experts_in_norm, experts_out_norm;
  std::vector<float> shared_in_norm, shared_out_norm;
};

// Loads one case; kGoldenDirMissing gives NotFound(NoGoldenFilesMessage()).
absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& path);

// A ModelSource over a golden case's weights (layer `layer`, default 0).
std::unique_ptr<ModelSource> MakeGoldenSource(const GoldenCase& c,
                                              int64_t layer = 0);

}  // namespace moe::testing

// A synthetic MoE model for demos, tests and benchmarks: random weights that
// are a pure function of (seed, layer, role, expert), so every process (the
// router, each worker) generates the same values for just the tensors it
// needs, without exchanging them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/model_source.h"

namespace moe {

struct SyntheticSpec {
  MoeLayerConfig layer;
  int64_t num_layers = 1;  // MoE layers 0 .. num_layers-1
  uint64_t seed = 0;
  // Skewed expert popularity for load-balancing work: gate row e is scaled
  // by (e + 1)^-gate_zipf, so low-numbered experts' logits spread wider and
  // win the top-k more often (0: every expert alike). Only the gate changes,
  // so the routing math stays the layer's own, and only the router, which
  // alone holds the gate, needs it.
  double gate_zipf = 0;
};

absl::StatusOr<std::unique_ptr<ModelSource>> MakeSyntheticModel(
    const SyntheticSpec& spec);

// The spec the binaries' common model flags describe: sizes, plus any
// further layer options as a JSON object in the golden `config` form
// (e.g. {"score_func": "sigmoid", "n_groups": 4, ...}).
struct SyntheticArgs {
  int64_t hidden = 0;
  int64_t inter = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t shared_inter = 0;
  int64_t layers = 1;
  uint64_t seed = 0;
  std::string options_json;  // may be empty
  double zipf = 0;           // SyntheticSpec::gate_zipf
};
absl::StatusOr<SyntheticSpec> MakeSyntheticSpec(const SyntheticArgs& args);

// Deterministic standard-normal-ish values (sum of uniforms) for inputs.
void FillSyntheticInput(uint64_t seed, int64_t count, float* out);

}  // namespace moe

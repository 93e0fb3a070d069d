// A synthetic MoE model for demos, tests and benchmarks: random weights that
// are a pure function of (seed, layer, role, expert), so every process (the
// router, each worker) generates the same values for just the tensors it
// needs, without exchanging them.
#pragma once

#include <cstdint>
#include <memory>

#include "core/model_source.h"

namespace moe {

struct SyntheticSpec {
  MoeLayerConfig layer;
  int64_t num_layers = 1;  // MoE layers 0 .. num_layers-1
  uint64_t seed = 0;
};

absl::StatusOr<std::unique_ptr<ModelSource>> MakeSyntheticModel(
    const SyntheticSpec& spec);

// Deterministic standard-normal-ish values (sum of uniforms) for inputs.
void FillSyntheticInput(uint64_t seed, int64_t count, float* out);

}  // namespace moe

// An independent, deliberately naive MoE layer in double precision, written
// straight from docs/architecture.md section 3 and sharing no code with the
// engine. Used to make "golden" cases for any config and token count.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/testutil/golden_case.h"

namespace moe::testing {

// The gate linear's output [tokens, E + Z] (Z zero experts): x·gate.weightᵀ
// (of the prenormed rows under router_prenorm), plus the router bias where
// the case has one; before any soft-cap, like the logits a caller sends.
std::vector<double> ReferenceGateLogits(const GoldenCase& c);

// Fills c.y, c.top_idx, c.top_w and c.top_shape from c.x and the weights.
void RunReferenceMoe(GoldenCase& c);

// A case with random weights and inputs for `config` and n tokens, with the
// reference's outputs.
GoldenCase RandomCase(const MoeLayerConfig& config, int64_t n, uint64_t seed,
                      const std::string& name = "random");

}  // namespace moe::testing

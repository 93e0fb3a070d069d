// One expert's bf16 weights as a GPU keeps them, and where its first GEMM
// leaves g and u: the host side of engine/cuda/cuda_weights.cc (the upload)
// and engine/cuda/cuda_experts.cc (the passes). Plain C++, no CUDA types:
// built into the CPU engine and tested on the CPU.
//
// A gated expert's first GEMM reads w13 [2 I, W] (W1's rows, then W3's)
// and writes gate-up rows [2 I]: g at column i, u at column I + i. A
// non-gated expert (config.gated false, relu2: Nemotron 3) has no W1: w13
// is W3 alone [I, W], its rows [I] hold u only, and the activation reads u
// where a gated one reads g and u (kernels/act_rule.h ignores g for relu2).
// W is the width of the rows the expert reads and writes:
// config.expert_width() for a routed expert (LatentMoE's latent width), H
// for the shared one. Block-scaled FP8 experts lay out the same way with I
// padded to whole 128-blocks (engine/cuda/fp8_image.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/moe_config.h"

namespace moe {

// The first GEMM's output columns: gate and up, or up alone.
inline int64_t GateUpCols(bool gated, int64_t inter) {
  return gated ? 2 * inter : inter;
}
// Where u starts in a gate-up row (g starts at 0).
inline int64_t UpCol(bool gated, int64_t inter) { return gated ? inter : 0; }

// The shape of one expert's GEMMs: [rows, W] x [GateUpCols, W]^T, the
// activation to [rows, I], then [rows, I] x [W, I]^T.
struct ExpertShape {
  int64_t width = 0;  // W
  int64_t inter = 0;  // I
  bool gated = true;
};
ExpertShape RoutedExpertShape(const MoeLayerConfig& config);
ExpertShape SharedExpertShape(const MoeLayerConfig& config);

// w13 of one expert in bf16 from W1 and W3 [I, W] (bf16 values, row-major;
// w1 null for a non-gated expert, and only then).
absl::StatusOr<std::vector<uint16_t>> PackBf16GateUp(const ExpertShape& shape,
                                                     const uint16_t* w1,
                                                     const uint16_t* w3);

}  // namespace moe

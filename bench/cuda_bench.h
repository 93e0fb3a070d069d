// moe-bench's GPU modes, each reported next to a reference measured in the
// same run on the same device (docs/architecture.md section 8):
//  - the whole layer (LocalMoe on the CUDA backend) against a dense
//    cuBLASLt bf16 GEMM of
//    the same FLOPs at the same number of tokens;
//  - the grouped SwiGLU alone against a dense GEMM of the same FLOPs;
//  - the NCCL dispatch and combine of the worker group against NCCL's own
//    plain all-to-all on the same buffers.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/synthetic_model.h"

namespace moe::bench {

absl::Status RunCudaLayer(const SyntheticSpec& spec, int device, int64_t tokens,
                          int reps);

struct ExpertsBenchArgs {
  int device = 0;
  int64_t hidden = 7168, inter = 2048, experts = 32;
  int64_t rows = 4096;  // routed rows over all local experts
  int reps = 20;
  uint64_t seed = 1;
  // Also time the same pass with block-scaled FP8 experts (sm_90), reported
  // against the bf16 grouped GEMM (the engine's bf16 pass where cuBLAS has
  // no grouped call).
  bool fp8 = false;
};
absl::Status RunCudaExperts(const ExpertsBenchArgs& args);

struct CollectiveBenchArgs {
  int gpus = 0;           // 0: every visible device
  int64_t tokens = 4096;  // per rank
  int64_t hidden = 7168, experts = 256, top_k = 8;
  int reps = 20;
  uint64_t seed = 1;
};
absl::Status RunCudaCollective(const CollectiveBenchArgs& args);

}  // namespace moe::bench

// Grouped SwiGLU over experts on a GPU: for each expert's contiguous block
// of bf16 rows, one cuBLASLt GEMM for gate and up together (fp32 out), one
// fused SiLU-mul over all rows, one GEMM for down. Workspaces are sized once.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/lt_matmul.h"

namespace moe {

class CudaExperts {
 public:
  // Room for up to max_rows rows through experts of intermediate size up to
  // max_inter.
  static absl::StatusOr<std::unique_ptr<CudaExperts>> Create(int64_t max_rows,
                                                             int64_t hidden,
                                                             int64_t max_inter);

  // Rows [offsets[g], offsets[g+1]) of `in` (bf16 [rows, H]) go through
  // experts[g] into the same rows of `out`, bf16 or (out_f32) fp32.
  absl::Status Run(LtMatmul& lt, absl::Span<const CudaExpert* const> experts,
                   absl::Span<const int64_t> offsets, const uint16_t* in,
                   void* out, bool out_f32, cudaStream_t stream);

 private:
  int64_t max_rows_ = 0, hidden_ = 0, max_inter_ = 0;
  DeviceBuffer gate_up_;  // fp32 [max_rows, 2 * max_inter]
  DeviceBuffer h_;        // bf16 [max_rows, max_inter]
};

}  // namespace moe

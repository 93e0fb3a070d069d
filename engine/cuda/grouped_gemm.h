// One projection of many experts in one call: cublasGemmGroupedBatchedEx
// (cuBLAS 12.5+) with one group per expert, D_i[rows_i, n] = X_i[rows_i, k]
// W_i[n, k]^T in bf16 with fp32 accumulation (the only bf16 combination the
// call supports writes bf16: no fp32 output here). The matrices' addresses
// are device arrays the caller fills (engine/cuda/cuda_experts.cc keeps them
// per captured graph); sizes are host arrays kept here, sized once. The
// handle has its own workspace, so nothing is allocated on a step or during
// a stream capture. Not thread-safe: one per stream.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cublas_api.h"
#include "engine/cuda/device_buffer.h"

namespace moe {

class GroupedGemm {
 public:
  // UNAVAILABLE when this cuBLAS has no grouped call.
  static absl::StatusOr<std::unique_ptr<GroupedGemm>> Create(
      int max_groups, size_t workspace_bytes = size_t{32} << 20);
  ~GroupedGemm();

  // Group i < rows.size() multiplies rows[i] (> 0) rows; w, x and d are
  // device arrays of rows.size() device pointers (16-byte aligned, as are
  // the row strides k and n times 2 bytes: the caller checks).
  absl::Status Run(absl::Span<const int> rows, int n, int k,
                   const void* const* w, const void* const* x, void* const* d,
                   cudaStream_t stream);

 private:
  GroupedGemm() = default;

  const CublasApi* api_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  cudaStream_t bound_stream_ = nullptr;
  bool bound_ = false;
  // Per-group host arguments, sized max_groups once.
  std::vector<cublasOperation_t> ta_, tb_;
  std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, group_size_;
  std::vector<float> alpha_, beta_;
};

}  // namespace moe

// Row-major GEMMs through cuBLASLt: D[m, n] = X[m, k] W[n, k]^T, the shape of
// every projection in the layer (weights stored [out, in] as in HF). Plans
// (descriptors, layouts, the heuristic's algorithm) are cached per shape,
// type and pointer alignment; the workspace is allocated once.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/device_buffer.h"

namespace moe {

class LtMatmul {
 public:
  static absl::StatusOr<std::unique_ptr<LtMatmul>> Create(
      size_t workspace_bytes = size_t{32} << 20);
  ~LtMatmul();

  // X and W of type `in` (CUDA_R_16BF, or CUDA_R_32F for the fp32 router),
  // D of type `out` (CUDA_R_32F or CUDA_R_16BF); fp32 accumulation, no
  // TF32. Does nothing when m is 0.
  absl::Status Run(int64_t m, int64_t n, int64_t k, const void* x,
                   const void* w, void* d, cudaDataType_t in,
                   cudaDataType_t out, cudaStream_t stream);

  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, uint32_t,
                         uint32_t, uint32_t>;
  absl::StatusOr<const Plan*> GetPlan(const Key& key);

  const CublasLtApi* api_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace moe

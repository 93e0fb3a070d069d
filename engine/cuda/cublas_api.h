// cuBLAS (the BLAS API, not Lt), opened with dlopen on first use for the
// same reason as cuBLASLt (engine/cuda/cublaslt_api.h): its thread-local
// storage must not be reserved in every thread's stack at start-up. Only
// what the grouped expert GEMM needs (engine/cuda/grouped_gemm.h).
#pragma once

#include <cublas_api.h>

#include "absl/status/statusor.h"

namespace moe {

struct CublasApi {
  decltype(&cublasCreate_v2) Create;
  decltype(&cublasDestroy_v2) Destroy;
  decltype(&cublasSetStream_v2) SetStream;
  decltype(&cublasSetWorkspace_v2) SetWorkspace;
  decltype(&cublasGetStatusString) GetStatusString;
  decltype(&cublasGemmGroupedBatchedEx) GemmGroupedBatchedEx;
};

// Loads the library once (thread-safe); later calls return the same table.
// UNAVAILABLE when the library or one of its symbols is missing (cuBLAS
// before 12.5 has no cublasGemmGroupedBatchedEx): callers keep the
// per-expert cuBLASLt path then.
absl::StatusOr<const CublasApi*> Cublas();

}  // namespace moe

// cuBLASLt, opened with dlopen on first use instead of linked. The library
// carries ~94 KB of thread-local storage; for a library loaded at start-up,
// glibc reserves that in every thread's stack, and civetweb (behind the
// Prometheus endpoint) starts its threads with a small fixed stack, so
// pthread_create failed and --metrics-listen broke in every CUDA build.
// Loaded with dlopen, cuBLASLt's (general-dynamic) TLS is allocated lazily.
#pragma once

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace moe {

struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulAlgoCheck) MatmulAlgoCheck;
  decltype(&cublasLtMatmul) Matmul;
};

// Loads the library once (thread-safe); later calls return the same table.
absl::StatusOr<const CublasLtApi*> CublasLt();

}  // namespace moe

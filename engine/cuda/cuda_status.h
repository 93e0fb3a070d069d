// CUDA, cuBLAS(Lt) and NCCL errors as absl::Status, with the failing
// expression, file:line and the library's own message.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace moe {

absl::Status CudaError(cudaError_t e, const char* expr, const char* file,
                       int line);
absl::Status CublasError(cublasStatus_t s, const char* expr, const char* file,
                         int line);

// Whether a CUDA device is usable here; the error says why not (no driver,
// no device), for skipping tests with a reason.
absl::Status CudaDeviceAvailable(int ordinal = 0);
// Devices visible here; 0 when there is no driver.
int CudaDeviceCount();

}  // namespace moe

#define MOE_CUDA_OK(expr)                                         \
  do {                                                            \
    const cudaError_t _moe_e = (expr);                            \
    if (_moe_e != cudaSuccess)                                    \
      return ::moe::CudaError(_moe_e, #expr, __FILE__, __LINE__); \
  } while (0)

#define MOE_CUBLAS_OK(expr)                                         \
  do {                                                              \
    const cublasStatus_t _moe_s = (expr);                           \
    if (_moe_s != CUBLAS_STATUS_SUCCESS)                            \
      return ::moe::CublasError(_moe_s, #expr, __FILE__, __LINE__); \
  } while (0)

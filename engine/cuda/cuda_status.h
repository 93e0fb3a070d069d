// cuBLAS(Lt) errors as absl::Status, with the failing expression, file:line
// and the library's own message (read through the dlopen'ed cuBLASLt). CUDA
// runtime errors and MOE_CUDA_OK live below comm/, in core/cuda/cuda_status.h,
// which this includes.
#pragma once

#include <cublasLt.h>

#include "absl/status/status.h"
#include "core/cuda/cuda_status.h"

namespace moe {

absl::Status CublasError(cublasStatus_t s, const char* expr, const char* file,
                         int line);

}  // namespace moe

#define MOE_CUBLAS_OK(expr)                                         \
  do {                                                              \
    const cublasStatus_t _moe_s = (expr);                           \
    if (_moe_s != CUBLAS_STATUS_SUCCESS)                            \
      return ::moe::CublasError(_moe_s, #expr, __FILE__, __LINE__); \
  } while (0)

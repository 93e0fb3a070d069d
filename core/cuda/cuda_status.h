// CUDA runtime errors as absl::Status, with the failing expression,
// file:line and the runtime's own message; whether a device is usable. Below
// comm/ and engine/ (the NCCL communicator and the CUDA backend both report
// through it); cuBLAS errors, which need the engine's dlopen'ed cuBLASLt,
// are engine/cuda/cuda_status.h's.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace moe {

// RESOURCE_EXHAUSTED for an allocation failure, INTERNAL otherwise.
absl::Status CudaError(cudaError_t e, const char* expr, const char* file,
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

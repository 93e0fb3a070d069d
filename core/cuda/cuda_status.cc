#include "core/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::Status CudaError(cudaError_t e, const char* expr, const char* file,
                       int line) {
  const std::string msg =
      absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(e), ": ",
                   cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(msg)
                                        : absl::InternalError(msg);
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::Status CudaDeviceAvailable(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorString(e)));
  }
  if (ordinal >= count) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", ordinal, " requested, ", count, " visible"));
  }
  return absl::OkStatus();
}

}  // namespace moe

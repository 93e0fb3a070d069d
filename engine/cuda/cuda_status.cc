#include "engine/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublaslt_api.h"

namespace moe {

absl::Status CublasError(cublasStatus_t s, const char* expr, const char* file,
                         int line) {
  auto api = CublasLt();
  if (!api.ok()) {
    return absl::InternalError(absl::StrCat(
        file, ":", line, ": ", expr, ": cuBLAS status ", static_cast<int>(s)));
  }
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ",
                                          (*api)->GetStatusName(s), ": ",
                                          (*api)->GetStatusString(s)));
}

}  // namespace moe

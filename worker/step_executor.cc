#include "worker/step_executor.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/cpu_step_executor.h"
#ifdef MOE_HAVE_CUDA
#include "worker/cuda/cuda_step_executor.h"
#endif

namespace moe {

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(
    const std::string& device, int threads) {
  if (device == "cpu") return std::make_unique<CpuStepExecutor>(threads);
  if (device.rfind("cuda", 0) == 0) {
    int ordinal = 0;
    if (device != "cuda" &&
        (device.size() < 6 || device[4] != ':' ||
         !absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device ", device, ": expected cpu, cuda or cuda:N"));
    }
#ifdef MOE_HAVE_CUDA
    return CreateCudaStepExecutor(ordinal);
#else
    return absl::UnimplementedError(
        absl::StrCat("--device ", device,
                     ": this build has no CUDA backend (configure with "
                     "-DMOE_CUDA=ON where the CUDA toolkit is installed)"));
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", device, ": expected cpu, cuda or cuda:N"));
}

}  // namespace moe

#include "worker/step_executor.h"

#include "absl/strings/str_cat.h"
#include "core/device_spec.h"
#include "core/status_macros.h"
#include "worker/cpu_step_executor.h"
#ifdef MOE_HAVE_CUDA
#include "worker/cuda/cuda_step_executor.h"
#endif

namespace moe {

LoadOptions WorkerLoadOptions(int64_t begin, int64_t end) {
  LoadOptions opts;
  opts.load_gate = false;
  opts.load_shared = false;
  opts.expert_begin = begin;
  opts.expert_end = end;
  return opts;
}

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(
    const std::string& device, int threads) {
  MOE_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(device));
  if (!spec.cuda) return std::make_unique<CpuStepExecutor>(threads);
#ifdef MOE_HAVE_CUDA
  return CreateCudaStepExecutor(spec.ordinal);
#else
  return absl::UnimplementedError(
      absl::StrCat("--device ", device,
                   ": this build has no CUDA backend (configure with "
                   "-DMOE_CUDA=ON where the CUDA toolkit is installed)"));
#endif
}

}  // namespace moe

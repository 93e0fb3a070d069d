#include "engine/expert_backend.h"

#include "absl/strings/str_cat.h"
#include "core/device_spec.h"
#include "core/fp8_rows.h"
#include "core/status_macros.h"
#include "engine/cpu_backend.h"
#ifdef MOE_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace moe {

int64_t DispatchRowBytes(DispatchDType dispatch, ElementType row_type,
                         int64_t hidden) {
  switch (dispatch) {
    case DispatchDType::kBf16:
      return 2 * hidden;
    case DispatchDType::kFp8:
      return Fp8RowBytes(hidden);
    case DispatchDType::kRowType:
      break;
  }
  return static_cast<int64_t>(DTypeSize(row_type)) * hidden;
}

const char* DispatchDTypeName(DispatchDType dispatch) {
  switch (dispatch) {
    case DispatchDType::kBf16:
      return "bf16";
    case DispatchDType::kFp8:
      return "fp8";
    case DispatchDType::kRowType:
      break;
  }
  return "row type";
}

namespace {

absl::Status NotBuiltHere(DispatchDType dispatch, const std::string& name) {
  return absl::FailedPreconditionError(absl::StrCat(
      "--dispatch-dtype ", DispatchDTypeName(dispatch),
      " (a router flag) is not built for the ", name,
      " backend yet; start the router with --dispatch-dtype auto or f32"));
}

}  // namespace

absl::Status ExpertBackend::PackRows(const EpStepInput&, const EpPlan& plan,
                                     void*) {
  return NotBuiltHere(plan.dispatch, name());
}

absl::Status ExpertBackend::UnpackRows(const EpPlan& plan, const void*, void*) {
  return NotBuiltHere(plan.dispatch, name());
}

absl::Status ExpertBackend::PackOutputs(const EpPlan&, const void*, void*) {
  return absl::InternalError(absl::StrCat(
      "the ", name(), " backend cannot send its expert outputs as bf16"));
}

bool PacksOutputs(DispatchDType dispatch, ElementType row_type) {
  return dispatch != DispatchDType::kRowType && row_type == ElementType::kF32;
}

absl::StatusOr<std::unique_ptr<ExpertBackend>> CreateExpertBackend(
    const std::string& device, int threads) {
  MOE_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(device));
  if (!spec.cuda) return std::make_unique<CpuBackend>(threads);
#ifdef MOE_HAVE_CUDA
  return CreateCudaBackend(spec.ordinal);
#else
  return absl::UnimplementedError(
      absl::StrCat("--device ", device,
                   ": this build has no CUDA backend (configure with "
                   "-DMOE_CUDA=ON where the CUDA toolkit is installed)"));
#endif
}

}  // namespace moe

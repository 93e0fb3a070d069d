#include "worker/step_message.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/step_codec.h"

namespace moe {

absl::Status RunStepMessage(StepExecutor& executor, const moe::v1::Step& step,
                            Communicator& comm, moe::v1::StepResult* result) {
  const auto received = std::chrono::steady_clock::now();
  StepHeader header;
  header.step_id = step.step_id();
  header.layer = step.layer();
  header.placement_epoch = step.placement_epoch();
  header.direct = step.direct();
  const moe::v1::DType result_dtype = step.result_dtype();
  // The executor asks for the rows once it has checked placement and layer.
  auto decode = [&](int64_t hidden, std::vector<float>* scratch,
                    EpStepInput* in) -> absl::Status {
    if (result_dtype != moe::v1::DTYPE_UNSPECIFIED &&
        result_dtype != moe::v1::F32 && result_dtype != moe::v1::BF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step.step_id(), ": result_dtype must be F32 or BF16, got ",
          static_cast<int>(result_dtype)));
    }
    return DecodeStep(step, hidden, scratch, in);
  };
  StepOutput out;
  MOE_RETURN_IF_ERROR(executor.Run(header, decode, comm, &out));
  if (header.direct) {
    EncodeDirectResult(out.direct, out.tokens, out.slots, out.hidden, out.times,
                       result);
  } else {
    EncodeStepResult(out.y, out.tokens, out.hidden, out.times, result_dtype,
                     result);
  }
  using Us = std::chrono::duration<double, std::micro>;
  result->set_decode_us(out.decode_us);
  result->set_step_us(Us(std::chrono::steady_clock::now() - received).count());
  return absl::OkStatus();
}

}  // namespace moe

// The CUDA backend: bf16 experts uploaded once (gate and up fused into one
// [2I, H] matrix), cuBLASLt GEMMs with fp32 accumulation, the fused routing
// kernel, permute/unpermute and the slot-order combine on the device, all on
// one non-blocking stream that device collectives (NCCL) enqueue on too.
// Every workspace is sized at Load from the step bounds (engine/ep_plan.h);
// a step allocates nothing and synchronises once, at its end. What crosses
// between host and device, and when the host waits, is the host logic of
// engine/device_backend.h, which this backend fills with its kernels.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/expert_backend.h"

namespace moe {

// Fails with the reason when device `ordinal` is not usable.
absl::StatusOr<std::unique_ptr<ExpertBackend>> CreateCudaBackend(int ordinal);

}  // namespace moe

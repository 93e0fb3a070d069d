// The device math checks (engine/device_backend.h) in a file of their own,
// so that a test can ask what a GPU backend computes without linking the
// backend itself.
#include "absl/strings/str_cat.h"
#include "engine/device_backend.h"

namespace moe {

absl::Status CheckDeviceExpertMath(const MoeLayerConfig& c,
                                   absl::string_view backend) {
  // The CPU has per-expert gate biases only where there is a gate; a
  // non-gated expert with biases has no device form yet.
  if (!c.gated && c.expert_bias) {
    return absl::UnimplementedError(absl::StrCat(
        backend,
        " does not compute expert biases (expert_bias) on non-gated experts "
        "yet: serve this model with --device cpu"));
  }
  return absl::OkStatus();
}

absl::Status CheckDeviceRouterMath(const MoeLayerConfig& c,
                                   absl::string_view backend) {
  // LatentMoE's frame runs on the host (DeviceBackend::EnterExperts).
  const char* missing =
      c.branch_norms       ? "Gemma 4's branch norms (branch_norms)"
      : c.router_prenorm   ? "the router pre-norm (router_prenorm)"
      : c.per_expert_scale ? "per-expert scales (per_expert_scale)"
                           : nullptr;
  if (missing == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      backend, " does not compute ", missing,
      " on its router part yet: route this model on a CPU router; CUDA "
      "workers can run its experts"));
}

absl::Status CheckDeviceLayerMath(const MoeLayerConfig& c,
                                  absl::string_view backend, bool router_part) {
  if (absl::Status s = CheckDeviceExpertMath(c, backend); !s.ok()) return s;
  return router_part ? CheckDeviceRouterMath(c, backend) : absl::OkStatus();
}

}  // namespace moe

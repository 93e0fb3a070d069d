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
  // The experts' frame, Gemma 4's routing and its shared expert's norms run
  // on the host (DeviceBackend::EnterExperts, RouteTokens, Shared). The
  // device's shared expert applies its gate before the host's post-norm,
  // and to the pre-normed rows: the CPU gates the post-normed output by x.
  if (c.branch_norms && c.shared_gate && c.has_shared()) {
    return absl::UnimplementedError(absl::StrCat(
        backend,
        " does not compute a shared-expert gate (shared_gate) under branch "
        "norms (branch_norms) on its router part yet: route this model on a "
        "CPU router; CUDA workers can run its experts"));
  }
  return absl::OkStatus();
}

absl::Status CheckDeviceLayerMath(const MoeLayerConfig& c,
                                  absl::string_view backend, bool router_part) {
  if (absl::Status s = CheckDeviceExpertMath(c, backend); !s.ok()) return s;
  return router_part ? CheckDeviceRouterMath(c, backend) : absl::OkStatus();
}

bool RoutesOnHost(const MoeLayerConfig& c) {
  // The fused kernel has none of these: Gemma 4's pre-norm and per-expert
  // scales, PhiMoE's sparsemixer, Grok-1's soft-cap, LongCat-Flash's zero
  // experts (E + Z router rows, E dispatched).
  return c.router_prenorm || c.per_expert_scale ||
         c.score_func == ScoreFunc::kSparsemixer || c.router_softcap > 0.0f ||
         c.zero_experts > 0;
}

bool NeedsHostParts(const MoeLayerConfig& c) {
  return c.has_expert_frame() || RoutesOnHost(c) || c.output_bias;
}

}  // namespace moe

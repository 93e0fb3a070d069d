// CheckDeviceLayerMath (engine/device_backend.h) in a file of its own, so
// that a test can ask what a GPU backend computes without linking the
// backend itself.
#include "absl/strings/str_cat.h"
#include "engine/device_backend.h"

namespace moe {

absl::Status CheckDeviceLayerMath(const MoeLayerConfig& c,
                                  absl::string_view backend) {
  const char* missing = !c.gated             ? "non-gated experts (relu2)"
                        : c.latent > 0       ? "LatentMoE (latent projections)"
                        : c.branch_norms     ? "branch norms (Gemma 4)"
                        : c.router_prenorm   ? "the router pre-norm (Gemma 4)"
                        : c.per_expert_scale ? "per-expert scales (Gemma 4)"
                                             : nullptr;
  if (missing == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(backend, " does not compute ", missing,
                   " yet: serve this model with --device cpu"));
}

}  // namespace moe

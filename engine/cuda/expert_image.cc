#include "engine/cuda/expert_image.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe {

ExpertShape RoutedExpertShape(const MoeLayerConfig& c) {
  return {.width = c.expert_width(), .inter = c.inter, .gated = c.gated};
}

ExpertShape SharedExpertShape(const MoeLayerConfig& c) {
  // Non-gated layers have non-gated shared experts too (config.gated).
  return {.width = c.hidden, .inter = c.shared_inter, .gated = c.gated};
}

absl::StatusOr<std::vector<uint16_t>> PackBf16GateUp(const ExpertShape& shape,
                                                     const uint16_t* w1,
                                                     const uint16_t* w3) {
  if ((w1 != nullptr) != shape.gated || w3 == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", shape.gated ? "gated" : "non-gated", " expert needs W3",
        shape.gated ? " and W1" : " and no W1"));
  }
  const int64_t half = shape.inter * shape.width;
  std::vector<uint16_t> w13(GateUpCols(shape.gated, shape.inter) * shape.width);
  if (shape.gated) std::copy(w1, w1 + half, w13.begin());
  std::copy(w3, w3 + half,
            w13.begin() + UpCol(shape.gated, shape.inter) * shape.width);
  return w13;
}

}  // namespace moe

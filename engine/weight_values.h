// A weight tensor's values in the dtype a backend packs or uploads: a view
// when the source already has that dtype (and alignment), else converted.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"

namespace moe {

template <typename T>
struct WeightValues {
  const T* data = nullptr;
  std::vector<T> owned;
};

absl::StatusOr<WeightValues<float>> WeightsAsF32(const WeightTensor& t);
// bf16 bits, rounded to nearest even from wider types.
absl::StatusOr<WeightValues<uint16_t>> WeightsAsBf16(const WeightTensor& t);

}  // namespace moe

#include "engine/weight_values.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<WeightValues<float>> WeightsAsF32(const WeightTensor& t) {
  WeightValues<float> v;
  if (t.dtype == DType::kF32 &&
      reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
    v.data = reinterpret_cast<const float*>(t.data);
    return v;
  }
  v.owned.resize(t.numel());
  if (!ConvertToF32(t.dtype, t.data, v.owned.size(), v.owned.data())) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": cannot convert ", DTypeName(t.dtype), " to F32"));
  }
  v.data = v.owned.data();
  return v;
}

absl::StatusOr<WeightValues<uint16_t>> WeightsAsBf16(const WeightTensor& t) {
  WeightValues<uint16_t> v;
  if (t.dtype == DType::kBF16 &&
      reinterpret_cast<uintptr_t>(t.data) % alignof(uint16_t) == 0) {
    v.data = reinterpret_cast<const uint16_t*>(t.data);
    return v;
  }
  auto f = WeightsAsF32(t);
  if (!f.ok()) return f.status();
  v.owned.resize(t.numel());
  ConvertFromF32(DType::kBF16, f->data, v.owned.size(), v.owned.data());
  v.data = v.owned.data();
  return v;
}

}  // namespace moe

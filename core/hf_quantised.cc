#include "core/hf_quantised.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace moe {
namespace {

constexpr int64_t kMxBlock = 32;  // values per E8M0 scale (MXFP4)
constexpr uint8_t kE8M0NaN = 255;

absl::Status NoNaNScale(const uint8_t* s, int64_t count, int64_t per_row,
                        const std::string& name) {
  for (int64_t i = 0; i < count; ++i) {
    if (s[i] == kE8M0NaN) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": E8M0 scale [", i / per_row, ", ", i % per_row,
                       "] is 255 (NaN); expected 0-254"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckQuantTensor(const TensorRef& ref, const std::string& name,
                              const std::vector<DType>& dtypes,
                              const std::vector<int64_t>& shape) {
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || ref.entry->dtype == d;
  if (!dtype_ok) {
    std::vector<std::string> want;
    for (DType d : dtypes) want.emplace_back(DTypeName(d));
    return absl::InvalidArgumentError(absl::StrCat(
        ref.file, ": ", name, ": dtype ", DTypeName(ref.entry->dtype),
        ", expected ", absl::StrJoin(want, " or ")));
  }
  if (ref.entry->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        ref.file, ": ", name, ": shape ", ShapeString(ref.entry->shape),
        ", expected ", ShapeString(shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<WeightTensor> GatherMxfp4Rows(std::string name,
                                             const TensorRef& pairs,
                                             const TensorRef& scales,
                                             const std::string& scales_name,
                                             int64_t row0, int64_t step,
                                             int64_t out, int64_t in) {
  if (in % kMxBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": MXFP4 input width ", in, " is not a multiple of ", kMxBlock));
  }
  const int64_t row_bytes = in / 2, blocks = in / kMxBlock;
  WeightTensor t;
  t.name = std::move(name);
  t.dtype = DType::kU8;
  t.shape = {out, in};
  t.owned.resize(static_cast<size_t>(out * row_bytes));
  t.mx_scale.resize(static_cast<size_t>(out * blocks));
  const auto* src_s = reinterpret_cast<const uint8_t*>(scales.data);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t r = row0 + o * step;
    std::memcpy(t.owned.data() + o * row_bytes, pairs.data + r * row_bytes,
                row_bytes);
    std::memcpy(t.mx_scale.data() + o * blocks, src_s + r * blocks, blocks);
  }
  t.data = t.owned.data();
  MOE_RETURN_IF_ERROR(
      NoNaNScale(t.mx_scale.data(), out * blocks, blocks,
                 absl::StrCat(scales.file, ": ", scales_name, " (rows from ",
                              row0, " step ", step, ")")));
  return t;
}

absl::StatusOr<std::vector<float>> E8M0Factors(
    const TensorRef& ref, const std::string& name,
    const std::vector<int64_t>& shape) {
  MOE_RETURN_IF_ERROR(
      CheckQuantTensor(ref, name, {DType::kF8E8M0, DType::kU8}, shape));
  const int64_t n = static_cast<int64_t>(ref.entry->numel);
  const auto* s = reinterpret_cast<const uint8_t*>(ref.data);
  MOE_RETURN_IF_ERROR(NoNaNScale(s, n, shape.empty() ? 1 : shape.back(),
                                 absl::StrCat(ref.file, ": ", name)));
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = E8M0ToF32(s[i]);
  return f;
}

absl::StatusOr<WeightTensor> ReadNvfp4(const TensorRef& weight,
                                       const TensorRef& scale,
                                       const TensorRef& scale_2,
                                       const std::string (&names)[3],
                                       int64_t out, int64_t in) {
  constexpr int64_t kNvBlock = 16;  // values per E4M3 scale (NVFP4)
  if (in % kNvBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(weight.file, ": ", names[0], ": NVFP4 input width ", in,
                     " is not a multiple of ", kNvBlock));
  }
  MOE_RETURN_IF_ERROR(
      CheckQuantTensor(weight, names[0], {DType::kU8}, {out, in / 2}));
  MOE_RETURN_IF_ERROR(CheckQuantTensor(scale, names[1], {DType::kF8E4M3},
                                       {out, in / kNvBlock}));
  const std::vector<int64_t> s2_shape = scale_2.entry->shape;
  MOE_RETURN_IF_ERROR(CheckQuantTensor(
      scale_2, names[2], {DType::kF32},
      s2_shape.size() == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{}));
  WeightTensor t;
  t.name = absl::StrCat(weight.file, ": ", names[0]);
  t.dtype = DType::kU8;
  t.shape = {out, in};
  t.owned.resize(static_cast<size_t>(out * in / 2));
  if (!t.owned.empty()) {
    std::memcpy(t.owned.data(), weight.data, t.owned.size());
  }
  t.data = t.owned.data();
  const auto* s = reinterpret_cast<const uint8_t*>(scale.data);
  t.nv_scale.assign(s, s + out * (in / kNvBlock));
  std::memcpy(&t.nv_global, scale_2.data, sizeof(float));
  if (!std::isfinite(t.nv_global)) {
    return absl::InvalidArgumentError(
        absl::StrCat(scale_2.file, ": ", names[2], ": NVFP4 global scale ",
                     t.nv_global, " is not finite"));
  }
  const int64_t blocks = in / kNvBlock;
  for (int64_t i = 0; i < out * blocks; ++i) {
    if ((t.nv_scale[i] & 0x7f) == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          scale.file, ": ", names[1], ": E4M3 scale [", i / blocks, ", ",
          i % blocks, "] is NaN; expected a finite E4M3 value"));
    }
  }
  return t;
}

}  // namespace moe

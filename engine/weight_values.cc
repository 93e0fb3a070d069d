#include "engine/weight_values.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cpu/packed_gemm.h"

namespace moe {
namespace {

constexpr int64_t kBlock = kernels::cpu::kFp8BlockK;
// The largest finite E4M3FN value: a block's amax maps to it.
constexpr float kE4M3Max = 448.0f;

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

// Codes times their block scales.
void Dequantize(const WeightTensor& t, float* out) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const int64_t bc = t.block_cols, br = t.block_rows;
  const int64_t scale_cols = (cols + bc - 1) / bc;
  const auto* q = reinterpret_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = t.block_scale.data() + (i / br) * scale_cols;
    for (int64_t j = 0; j < cols; ++j) {
      const uint8_t c = q[i * cols + j];
      const float v =
          t.dtype == DType::kF8E4M3 ? F8E4M3ToF32(c) : F8E5M2ToF32(c);
      out[i * cols + j] = v * s[j / bc];
    }
  }
}

absl::Status CheckBlockScales(const WeightTensor& t) {
  if (t.shape.size() != 2 || t.block_rows <= 0 || t.block_cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": block-scaled FP8 weight must be 2-D with positive blocks"));
  }
  const int64_t want = (t.shape[0] + t.block_rows - 1) / t.block_rows *
                       ((t.shape[1] + t.block_cols - 1) / t.block_cols);
  if (static_cast<int64_t>(t.block_scale.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": ", t.block_scale.size(), " block scales, expected ", want));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WeightValues<float>> WeightsAsF32(const WeightTensor& t) {
  WeightValues<float> v;
  if (t.dtype == DType::kF32 &&
      reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
    v.data = reinterpret_cast<const float*>(t.data);
    return v;
  }
  v.owned.resize(t.numel());
  if (IsFp8(t.dtype) && !t.block_scale.empty()) {
    MOE_RETURN_IF_ERROR(CheckBlockScales(t));
    Dequantize(t, v.owned.data());
  } else if (!ConvertToF32(t.dtype, t.data, v.owned.size(), v.owned.data())) {
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

absl::StatusOr<Fp8Values> WeightsAsFp8(const WeightTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": FP8 weights must be 2-D"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  Fp8Values v;
  v.scale_cols = (cols + kBlock - 1) / kBlock;
  const bool block_scaled = !t.block_scale.empty();
  if (block_scaled) MOE_RETURN_IF_ERROR(CheckBlockScales(t));
  // E4M3 codes are kept as they are when their scale blocks cut K at
  // multiples of 128 (each 128-column block of ours inside one of theirs).
  if (t.dtype == DType::kF8E4M3 &&
      (!block_scaled || t.block_cols % kBlock == 0)) {
    v.codes = reinterpret_cast<const uint8_t*>(t.data);
    v.block_rows = block_scaled ? t.block_rows : std::max<int64_t>(rows, 1);
    const int64_t row_blocks = (rows + v.block_rows - 1) / v.block_rows;
    v.scale.assign(row_blocks * v.scale_cols, 1.0f);
    if (block_scaled) {
      const int64_t their_cols = (cols + t.block_cols - 1) / t.block_cols;
      for (int64_t rb = 0; rb < row_blocks; ++rb) {
        for (int64_t q = 0; q < v.scale_cols; ++q) {
          v.scale[rb * v.scale_cols + q] =
              t.block_scale[rb * their_cols + q * kBlock / t.block_cols];
        }
      }
    }
    return v;
  }
  // Anything else: quantise the fp32 values in 128 x 128 blocks.
  MOE_ASSIGN_OR_RETURN(WeightValues<float> f, WeightsAsF32(t));
  v.block_rows = kBlock;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  v.scale.assign(row_blocks * v.scale_cols, 1.0f);
  v.owned.resize(rows * cols);
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t r0 = rb * kBlock, r1 = std::min(rows, r0 + kBlock);
    for (int64_t q = 0; q < v.scale_cols; ++q) {
      const int64_t c0 = q * kBlock, c1 = std::min(cols, c0 + kBlock);
      float amax = 0.0f;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) {
          amax = std::max(amax, std::fabs(f.data[i * cols + j]));
        }
      }
      if (!std::isfinite(amax)) {
        return absl::InvalidArgumentError(
            absl::StrCat(t.name, ": non-finite weight in block [", r0, ", ", c0,
                         "]; cannot quantise to FP8"));
      }
      // An all-zero block keeps scale 1: its codes are all zero anyway.
      const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
      v.scale[rb * v.scale_cols + q] = scale;
      // The bulk form of F32ToF8E4M3(value / scale), vectorised; FP8
      // dispatch quantises its rows with the same loop (core/fp8_rows.h).
      for (int64_t i = r0; i < r1; ++i) {
        QuantizeF8E4M3(f.data + i * cols + c0, c1 - c0, scale,
                       v.owned.data() + i * cols + c0);
      }
    }
  }
  v.codes = v.owned.data();
  return v;
}

}  // namespace moe

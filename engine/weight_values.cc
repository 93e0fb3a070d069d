#include "engine/weight_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/mxfp4_rule.h"
#include "kernels/nvfp4_rule.h"

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

namespace kn = kernels;

// An MXFP4 tensor's shape, sizes and scales: the refusals a loader's bad
// input gets, each naming the tensor.
absl::Status CheckMxfp4(const WeightTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": MXFP4 weights must be 2-D [out, in]"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  if (cols % kn::kMxBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": MXFP4 input width ", cols,
                     " is not a multiple of ", kn::kMxBlock));
  }
  if (static_cast<int64_t>(t.mx_scale.size()) != rows * (cols / kn::kMxBlock)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": ", t.mx_scale.size(),
                     " MXFP4 scales, expected ", rows * (cols / kn::kMxBlock),
                     " (", rows, " x ", cols / kn::kMxBlock, ")"));
  }
  if (!t.owned.empty() &&
      static_cast<int64_t>(t.owned.size()) != rows * cols / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": ", t.owned.size(),
                     " bytes of MXFP4 codes, expected ", rows * cols / 2));
  }
  for (size_t i = 0; i < t.mx_scale.size(); ++i) {
    if (t.mx_scale[i] == kn::kE8M0NaN) {
      const int64_t blocks = cols / kn::kMxBlock;
      return absl::InvalidArgumentError(absl::StrCat(
          t.name, ": MXFP4 scale of row ", static_cast<int64_t>(i) / blocks,
          " block ", static_cast<int64_t>(i) % blocks,
          " is E8M0 255 (NaN); expected 0-254"));
    }
  }
  return absl::OkStatus();
}

// An NVFP4 tensor's shape, sizes, scales and global scale: the refusals a
// loader's bad input gets, each naming the tensor.
absl::Status CheckNvfp4(const WeightTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": NVFP4 weights must be 2-D [out, in]"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  if (cols % kn::kNvBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": NVFP4 input width ", cols,
                     " is not a multiple of ", kn::kNvBlock));
  }
  const int64_t blocks = cols / kn::kNvBlock;
  if (static_cast<int64_t>(t.nv_scale.size()) != rows * blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": ", t.nv_scale.size(), " NVFP4 scales, expected ",
        rows * blocks, " (", rows, " x ", blocks, ")"));
  }
  if (!t.owned.empty() &&
      static_cast<int64_t>(t.owned.size()) != rows * cols / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": ", t.owned.size(),
                     " bytes of NVFP4 codes, expected ", rows * cols / 2));
  }
  if (!std::isfinite(t.nv_global)) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name, ": NVFP4 global scale ", t.nv_global, " is not finite"));
  }
  for (size_t i = 0; i < t.nv_scale.size(); ++i) {
    if (kn::IsE4M3NaN(t.nv_scale[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.name, ": NVFP4 scale of row ", static_cast<int64_t>(i) / blocks,
          " block ", static_cast<int64_t>(i) % blocks,
          " is E4M3 NaN; expected a finite E4M3 value"));
    }
  }
  return absl::OkStatus();
}

// The bf16 bits of a 4-bit tensor [rows, cols] whose value [i][j] is
// value(i, j): what a GPU keeps of MXFP4 and NVFP4 experts.
template <typename ValueFn>
WeightValues<uint16_t> Fp4AsBf16(const WeightTensor& t, ValueFn value) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> row(cols);
  WeightValues<uint16_t> v;
  v.owned.resize(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) row[j] = value(i, j);
    ConvertFromF32(DType::kBF16, row.data(), cols, v.owned.data() + i * cols);
  }
  v.data = v.owned.data();
  return v;
}

// A U8 tensor [out, in] holding a copy of `pairs`, the E2M1 code pairs of
// a 4-bit format (`format`, blocks of `block` values) whose scales the
// caller adds: the checks both formats share.
absl::StatusOr<WeightTensor> Fp4CodeTensor(std::string name,
                                           absl::string_view format,
                                           int64_t block, int64_t out,
                                           int64_t in, const uint8_t* pairs,
                                           size_t pair_bytes) {
  if (out < 0 || in < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", format,
                                                   " shape [", out, ", ", in,
                                                   "] has a negative size"));
  }
  if (in % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", format, " input width ", in,
                     " is not a multiple of ", block));
  }
  if (static_cast<int64_t>(pair_bytes) != out * in / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", pair_bytes, " bytes of ", format, " codes for [", out, ", ",
        in, "], expected ", out * in / 2));
  }
  WeightTensor t;
  t.name = std::move(name);
  t.dtype = DType::kU8;
  t.shape = {out, in};
  t.owned.resize(pair_bytes);
  if (pair_bytes > 0) std::memcpy(t.owned.data(), pairs, pair_bytes);
  t.data = t.owned.data();
  return t;
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
  if (t.is_mxfp4()) {
    MOE_RETURN_IF_ERROR(CheckMxfp4(t));
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const auto* pairs = reinterpret_cast<const uint8_t*>(t.data);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        v.owned[i * cols + j] =
            kn::Mxfp4Value(pairs + i * cols / 2,
                           t.mx_scale.data() + i * (cols / kn::kMxBlock), j);
      }
    }
  } else if (t.is_nvfp4()) {
    MOE_RETURN_IF_ERROR(CheckNvfp4(t));
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const auto* pairs = reinterpret_cast<const uint8_t*>(t.data);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        v.owned[i * cols + j] = kn::Nvfp4Value(
            pairs + i * cols / 2, t.nv_scale.data() + i * (cols / kn::kNvBlock),
            t.nv_global, j);
      }
    }
  } else if (IsFp8(t.dtype) && !t.block_scale.empty()) {
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

absl::StatusOr<Mxfp4Values> WeightsAsMxfp4(const WeightTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": MXFP4 weights must be 2-D"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  Mxfp4Values v;
  v.blocks = kn::MxBlocks(cols);
  v.row_bytes = v.blocks * kn::kMxBlock / 2;
  if (t.is_mxfp4()) {
    MOE_RETURN_IF_ERROR(CheckMxfp4(t));
    v.pairs = reinterpret_cast<const uint8_t*>(t.data);
    v.scales = t.mx_scale.data();
    return v;
  }
  // Anything else: quantise each row's blocks of 32 (the last one shorter).
  MOE_ASSIGN_OR_RETURN(WeightValues<float> f, WeightsAsF32(t));
  v.owned_pairs.assign(rows * v.row_bytes, 0);
  v.owned_scales.assign(rows * v.blocks, 0);
  uint8_t codes[kn::kMxBlock];
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = f.data + i * cols;
    for (int64_t q = 0; q < v.blocks; ++q) {
      const int64_t c0 = q * kn::kMxBlock;
      const int64_t n = std::min<int64_t>(kn::kMxBlock, cols - c0);
      for (int64_t j = 0; j < n; ++j) {
        if (!std::isfinite(row[c0 + j])) {
          return absl::InvalidArgumentError(
              absl::StrCat(t.name, ": non-finite weight at [", i, ", ", c0 + j,
                           "]; cannot quantise to MXFP4"));
        }
      }
      v.owned_scales[i * v.blocks + q] =
          kn::Mxfp4QuantizeBlock(row + c0, n, codes);
      uint8_t* dst = v.owned_pairs.data() + i * v.row_bytes + c0 / 2;
      for (int64_t j = 0; j < n; ++j) {
        dst[j / 2] |= static_cast<uint8_t>(codes[j] << (j % 2 == 0 ? 0 : 4));
      }
    }
  }
  v.pairs = v.owned_pairs.data();
  v.scales = v.owned_scales.data();
  return v;
}

absl::StatusOr<WeightValues<uint16_t>> WeightsAsMxfp4Bf16(
    const WeightTensor& t) {
  MOE_ASSIGN_OR_RETURN(Mxfp4Values q, WeightsAsMxfp4(t));
  return Fp4AsBf16(t, [&q](int64_t i, int64_t j) {
    return kn::Mxfp4Value(q.row_pairs(i), q.row_scales(i), j);
  });
}

absl::StatusOr<WeightTensor> MakeMxfp4Tensor(std::string name, int64_t out,
                                             int64_t in, const uint8_t* pairs,
                                             size_t pair_bytes,
                                             const uint8_t* scales,
                                             size_t scale_bytes) {
  MOE_ASSIGN_OR_RETURN(
      WeightTensor t, Fp4CodeTensor(std::move(name), "MXFP4", kn::kMxBlock, out,
                                    in, pairs, pair_bytes));
  t.mx_scale.assign(scales, scales + scale_bytes);
  if (t.mx_scale.empty() && out * in > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": no MXFP4 scales"));
  }
  MOE_RETURN_IF_ERROR(CheckMxfp4(t));
  return t;
}

absl::StatusOr<Nvfp4Values> WeightsAsNvfp4(const WeightTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": NVFP4 weights must be 2-D"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  Nvfp4Values v;
  v.blocks = kn::NvBlocks(cols);
  v.row_bytes = v.blocks * kn::kNvBlock / 2;
  if (t.is_nvfp4()) {
    MOE_RETURN_IF_ERROR(CheckNvfp4(t));
    v.pairs = reinterpret_cast<const uint8_t*>(t.data);
    v.scales = t.nv_scale.data();
    v.global = t.nv_global;
    return v;
  }
  // Anything else: ModelOpt's rule, one global scale from the tensor's
  // amax, then each row's blocks of 16 (the last one shorter).
  MOE_ASSIGN_OR_RETURN(WeightValues<float> f, WeightsAsF32(t));
  float amax = 0.0f;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(f.data[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": non-finite weight at [", i / cols, ", ",
                       i % cols, "]; cannot quantise to NVFP4"));
    }
    amax = std::max(amax, std::fabs(f.data[i]));
  }
  v.global = kn::Nvfp4GlobalScale(amax);
  v.owned_pairs.assign(rows * v.row_bytes, 0);
  v.owned_scales.assign(rows * v.blocks, 0);
  uint8_t codes[kn::kNvBlock];
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = f.data + i * cols;
    for (int64_t q = 0; q < v.blocks; ++q) {
      const int64_t c0 = q * kn::kNvBlock;
      const int64_t n = std::min<int64_t>(kn::kNvBlock, cols - c0);
      v.owned_scales[i * v.blocks + q] =
          kn::Nvfp4QuantizeBlock(row + c0, n, v.global, codes);
      uint8_t* dst = v.owned_pairs.data() + i * v.row_bytes + c0 / 2;
      for (int64_t j = 0; j < n; ++j) {
        dst[j / 2] |= static_cast<uint8_t>(codes[j] << (j % 2 == 0 ? 0 : 4));
      }
    }
  }
  v.pairs = v.owned_pairs.data();
  v.scales = v.owned_scales.data();
  return v;
}

absl::StatusOr<WeightValues<uint16_t>> WeightsAsNvfp4Bf16(
    const WeightTensor& t) {
  MOE_ASSIGN_OR_RETURN(Nvfp4Values q, WeightsAsNvfp4(t));
  return Fp4AsBf16(t, [&q](int64_t i, int64_t j) {
    return kn::Nvfp4Value(q.row_pairs(i), q.row_scales(i), q.global, j);
  });
}

absl::StatusOr<WeightTensor> MakeNvfp4Tensor(std::string name, int64_t out,
                                             int64_t in, const uint8_t* pairs,
                                             size_t pair_bytes,
                                             const uint8_t* scales,
                                             size_t scale_bytes, float global) {
  MOE_ASSIGN_OR_RETURN(
      WeightTensor t, Fp4CodeTensor(std::move(name), "NVFP4", kn::kNvBlock, out,
                                    in, pairs, pair_bytes));
  t.nv_scale.assign(scales, scales + scale_bytes);
  t.nv_global = global;
  if (t.nv_scale.empty() && out * in > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": no NVFP4 scales"));
  }
  MOE_RETURN_IF_ERROR(CheckNvfp4(t));
  return t;
}

}  // namespace moe

#include "engine/cuda/fp8_image.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/expert_image.h"
#include "engine/weight_values.h"
#include "kernels/fp8_rule.h"

namespace moe {
namespace {

namespace k = kernels;

// Must match kernels::cuda::kMaxFp8Segments (kernels/cuda/kernels.h, not
// includable from the CPU build); tests/engine/fp8_image_test.cc checks
// the CUDA build's value.
constexpr int64_t kMaxSegments = 256;

// Codes with scales on 128 x 128 blocks: the checkpoint's own when each of
// our row blocks lies inside one of its row blocks (WeightsAsFp8 already
// re-cuts columns to 128), else requantised from the dequantised values.
absl::StatusOr<Fp8Values> BlockCodes(const WeightTensor& t) {
  MOE_ASSIGN_OR_RETURN(Fp8Values v, WeightsAsFp8(t));
  const int64_t rows = t.shape[0];
  if (v.block_rows % k::kFp8Block == 0 || v.block_rows >= rows) return v;
  MOE_ASSIGN_OR_RETURN(WeightValues<float> f, WeightsAsF32(t));
  WeightTensor w;
  w.name = t.name;
  w.dtype = DType::kF32;
  w.shape = t.shape;
  w.owned.resize(t.numel() * sizeof(float));
  std::memcpy(w.owned.data(), f.data, w.owned.size());
  w.data = w.owned.data();
  return WeightsAsFp8(w);
}

// Copies v's [rows, cols] codes to dst rows [row0, row0 + rows) (row
// stride ld) and their block scales to scale rows of blocks starting at
// row0 / 128 (stride scale_ld).
void Place(const Fp8Values& v, int64_t rows, int64_t cols, int64_t row0,
           int64_t ld, uint8_t* dst, int64_t scale_ld, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + (row0 + r) * ld, v.codes + r * cols, cols);
  }
  for (int64_t rb = 0; rb < k::Fp8Blocks(rows); ++rb) {
    const float* s = v.row_scales(rb * k::kFp8Block);
    for (int64_t kb = 0; kb < k::Fp8Blocks(cols); ++kb) {
      scale[(row0 / k::kFp8Block + rb) * scale_ld + kb] = s[kb];
    }
  }
}

absl::Status CheckShape(const WeightTensor& t, int64_t rows, int64_t cols) {
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols) {
    return absl::InvalidArgumentError(absl::StrCat(t.name, ": expected a [",
                                                   rows, ", ", cols,
                                                   "] weight for FP8 experts"));
  }
  return absl::OkStatus();
}

}  // namespace

Fp8PathChoice ChooseFp8GpuPath(int cc_major, int cc_minor, int64_t hidden,
                               int64_t local_experts) {
  const std::string sm = absl::StrCat("sm_", cc_major, cc_minor);
  if (cc_major != 9) {
    return {Fp8GpuPath::kDequantBf16,
            absl::StrCat(sm,
                         " has no cuBLASLt block-scaled FP8 matmul "
                         "(VEC128/BLK128x128 scales are sm_90 only)")};
  }
  if (hidden % 16 != 0) {
    return {Fp8GpuPath::kDequantBf16,
            absl::StrCat("hidden size ", hidden,
                         " is not a multiple of 16 (FP8 rows must be "
                         "16-byte aligned)")};
  }
  if (local_experts > kMaxSegments) {
    return {Fp8GpuPath::kDequantBf16,
            absl::StrCat(local_experts, " local experts exceed the ",
                         kMaxSegments, " one FP8 pass handles")};
  }
  return {Fp8GpuPath::kBlockScaled,
          absl::StrCat(sm,
                       ": E4M3 weights with 128x128 block scales, "
                       "cuBLASLt block-scaled FP8 matmuls")};
}

absl::StatusOr<Fp8ExpertImage> PackFp8Expert(const WeightTensor* w1,
                                             const WeightTensor& w3,
                                             const WeightTensor& w2) {
  // The first of them gives the sizes: W1, or W3 of a non-gated expert.
  const WeightTensor& first = w1 != nullptr ? *w1 : w3;
  if (first.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(first.name, ": FP8 expert weights must be 2-D"));
  }
  const int64_t I = first.shape[0], H = first.shape[1];
  MOE_RETURN_IF_ERROR(CheckShape(w3, I, H));
  MOE_RETURN_IF_ERROR(CheckShape(w2, H, I));
  Fp8ExpertImage e;
  e.hidden = H;
  e.inter = I;
  e.gated = w1 != nullptr;
  e.hidden_k = Fp8Pad(H);
  e.inter_pad = Fp8InterPad(I);
  e.down_k = Fp8DownK(I);
  const int64_t Hk = e.hidden_k, Ip = e.inter_pad, Ik = e.down_k;
  const int64_t ld13 = k::Fp8WeightScaleLd(Hk), ld2 = k::Fp8WeightScaleLd(Ik);
  const int64_t gate_up_rows = GateUpCols(e.gated, Ip);
  e.w13.assign(gate_up_rows * Hk, 0);
  // Blocks of padding rows only keep scale 1 (their codes are 0).
  e.w13_scale.assign(k::Fp8WeightScaleFloats(gate_up_rows, Hk), 1.0f);
  e.w2.assign(H * Ik, 0);
  e.w2_scale.assign(k::Fp8WeightScaleFloats(H, Ik), 1.0f);
  if (e.gated) {
    MOE_ASSIGN_OR_RETURN(Fp8Values v1, BlockCodes(*w1));
    Place(v1, I, H, 0, Hk, e.w13.data(), ld13, e.w13_scale.data());
  }
  MOE_ASSIGN_OR_RETURN(Fp8Values v3, BlockCodes(w3));
  MOE_ASSIGN_OR_RETURN(Fp8Values v2, BlockCodes(w2));
  Place(v3, I, H, UpCol(e.gated, Ip), Hk, e.w13.data(), ld13,
        e.w13_scale.data());
  Place(v2, H, I, 0, Ik, e.w2.data(), ld2, e.w2_scale.data());
  return e;
}

std::vector<Fp8DequantPart> Fp8DequantParts(const Fp8ExpertImage& e) {
  const int64_t H = e.hidden, I = e.inter, Hk = e.hidden_k;
  const int64_t ld13 = k::Fp8WeightScaleLd(Hk);
  Fp8DequantPart w1{false, I, H, 0, Hk, 0, ld13, 0, H};
  // W3 starts on a 128-row block (row 0 without W1): its scales on a row of
  // blocks of their own.
  const int64_t up = UpCol(e.gated, e.inter_pad);
  Fp8DequantPart w3{false, I,
                    H,     up * Hk,
                    Hk,    up / k::kFp8Block * ld13,
                    ld13,  UpCol(e.gated, I) * H,
                    H};
  Fp8DequantPart w2{true, H, I, 0, e.down_k, 0, k::Fp8WeightScaleLd(e.down_k),
                    0,    I};
  if (!e.gated) return {w3, w2};
  return {w1, w3, w2};
}

float Fp8W13Value(const Fp8ExpertImage& e, int64_t row, int64_t col) {
  const int64_t ld = k::Fp8WeightScaleLd(e.hidden_k);
  return k::E4M3ToF32(e.w13[row * e.hidden_k + col]) *
         e.w13_scale[row / k::kFp8Block * ld + col / k::kFp8Block];
}

float Fp8W2Value(const Fp8ExpertImage& e, int64_t row, int64_t col) {
  const int64_t ld = k::Fp8WeightScaleLd(e.down_k);
  return k::E4M3ToF32(e.w2[row * e.down_k + col]) *
         e.w2_scale[row / k::kFp8Block * ld + col / k::kFp8Block];
}

}  // namespace moe

// A weight tensor's values in the dtype a backend packs or uploads: a view
// when the source already has that dtype (and alignment), else converted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"

namespace moe {

template <typename T>
struct WeightValues {
  const T* data = nullptr;
  std::vector<T> owned;
};

// fp32 values; block-quantised FP8 tensors come out dequantised (code times
// its block's scale, rounded once).
absl::StatusOr<WeightValues<float>> WeightsAsF32(const WeightTensor& t);
// bf16 bits, rounded to nearest even from wider types.
absl::StatusOr<WeightValues<uint16_t>> WeightsAsBf16(const WeightTensor& t);

// A 2-D weight as FP8 e4m3 codes with one fp32 scale per block of
// `block_rows` rows x 128 columns (the CPU kernels' K block): a view of an
// E4M3 checkpoint's codes with its scales re-cut to 128 columns, or the
// values quantised here in 128 x 128 blocks as DeepSeek-V3 does (scale =
// block amax / 448, codes rounded to nearest even).
struct Fp8Values {
  const uint8_t* codes = nullptr;  // [rows, cols]
  std::vector<uint8_t> owned;
  int64_t block_rows = 0;
  int64_t scale_cols = 0;    // ceil(cols / 128)
  std::vector<float> scale;  // [ceil(rows / block_rows), scale_cols]
  // The scales of `row`'s 128-column blocks.
  const float* row_scales(int64_t row) const {
    return scale.data() + row / block_rows * scale_cols;
  }
};
absl::StatusOr<Fp8Values> WeightsAsFp8(const WeightTensor& t);

// A 2-D weight [rows, cols] as MXFP4 (kernels/mxfp4_rule.h): a view of an
// MXFP4 tensor's codes and scales (cols a multiple of 32, no scale byte 255:
// checked, the error names the tensor), or the values quantised here by the
// OCP MX rule, each row's last block shorter when cols is not a multiple of
// 32 (the codes of zero padding; non-finite values refused).
struct Mxfp4Values {
  const uint8_t* pairs = nullptr;   // [rows, row_bytes] code pairs
  const uint8_t* scales = nullptr;  // [rows, MxBlocks(cols)] E8M0
  std::vector<uint8_t> owned_pairs, owned_scales;
  int64_t row_bytes = 0;  // MxBlocks(cols) * 16
  int64_t blocks = 0;     // MxBlocks(cols)
  const uint8_t* row_pairs(int64_t r) const { return pairs + r * row_bytes; }
  const uint8_t* row_scales(int64_t r) const { return scales + r * blocks; }
};
absl::StatusOr<Mxfp4Values> WeightsAsMxfp4(const WeightTensor& t);

// bf16 bits of the weight's MXFP4 form (WeightsAsMxfp4, dequantised): what
// a backend without FP4 arithmetic (the CUDA one: H100/H200 have no FP4
// tensor cores) keeps for --weight-dtype mxfp4 or an MXFP4 checkpoint.
// Exact: an E2M1 value (at most 2 significant bits) times 2^(s - 127) is a
// bf16 value for every scale s with a finite product.
absl::StatusOr<WeightValues<uint16_t>> WeightsAsMxfp4Bf16(
    const WeightTensor& t);

// The entry point for checkpoint loaders that read MXFP4 (gpt-oss
// `*_blocks`/`*_scales`, DeepSeek-V4 fp4 experts): one weight [out, in] from
// its raw E2M1 code pairs (out * in / 2 bytes, row-major, element 2j in the
// low nibble: gpt-oss's [out, in/32, 16] blocks and V4's [out, in/2] I8 are
// both this) and E8M0 scales (out * in / 32 bytes), copied into an owned
// WeightTensor that LoadLayerWeights packs as MXFP4 (or dequantises, for
// other weight dtypes). INVALID_ARGUMENT naming `name` when in is not a
// multiple of 32, a size is wrong, or a scale byte is 255 (NaN).
absl::StatusOr<WeightTensor> MakeMxfp4Tensor(std::string name, int64_t out,
                                             int64_t in, const uint8_t* pairs,
                                             size_t pair_bytes,
                                             const uint8_t* scales,
                                             size_t scale_bytes);

// A 2-D weight [rows, cols] as NVFP4 (kernels/nvfp4_rule.h): a view of an
// NVFP4 tensor's codes, scales and global scale (cols a multiple of 16, no
// E4M3 NaN scale: checked, the error names the tensor), or the values
// quantised here by ModelOpt's rule, each row's last block shorter when
// cols is not a multiple of 16 (non-finite values refused).
struct Nvfp4Values {
  const uint8_t* pairs = nullptr;   // [rows, row_bytes] code pairs
  const uint8_t* scales = nullptr;  // [rows, NvBlocks(cols)] E4M3
  std::vector<uint8_t> owned_pairs, owned_scales;
  float global = 1.0f;
  int64_t row_bytes = 0;  // NvBlocks(cols) * 8
  int64_t blocks = 0;     // NvBlocks(cols)
  const uint8_t* row_pairs(int64_t r) const { return pairs + r * row_bytes; }
  const uint8_t* row_scales(int64_t r) const { return scales + r * blocks; }
};
absl::StatusOr<Nvfp4Values> WeightsAsNvfp4(const WeightTensor& t);

// bf16 bits of the weight's NVFP4 form (WeightsAsNvfp4, dequantised and
// rounded once to bf16: unlike MXFP4's, an E2M1 value times an E4M3 scale
// times an fp32 global need not be a bf16 value): what the CUDA backend
// keeps for --weight-dtype nvfp4 or an NVFP4 checkpoint.
absl::StatusOr<WeightValues<uint16_t>> WeightsAsNvfp4Bf16(
    const WeightTensor& t);

// The entry point for checkpoint loaders that read NVFP4 (ModelOpt's
// `weight` / `weight_scale` / `weight_scale_2`): one weight [out, in] from
// its raw E2M1 code pairs (out * in / 2 bytes, row-major, element 2j in the
// low nibble), E4M3 block scales (out * in / 16 bytes) and global scale,
// copied into an owned WeightTensor that LoadLayerWeights packs as NVFP4
// (or dequantises, for other weight dtypes). INVALID_ARGUMENT naming `name`
// when in is not a multiple of 16, a size is wrong, a scale byte is E4M3
// NaN, or the global scale is not finite.
absl::StatusOr<WeightTensor> MakeNvfp4Tensor(std::string name, int64_t out,
                                             int64_t in, const uint8_t* pairs,
                                             size_t pair_bytes,
                                             const uint8_t* scales,
                                             size_t scale_bytes, float global);

}  // namespace moe

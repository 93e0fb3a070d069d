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

}  // namespace moe

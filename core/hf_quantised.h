// Released quantised checkpoint tensors read as WeightTensors (golden
// README, "Hugging Face families" and its MXFP4 and NVFP4 paragraphs): MXFP4
// code pairs with E8M0 scales (gpt-oss *_blocks/*_scales, DeepSeek-V4 fp4
// experts) and ModelOpt NVFP4 code pairs with E4M3 and global scales are
// kept 4-bit for the engine to pack or dequantise; E8M0 block scales of FP8
// weights (DeepSeek-V4's shared experts) become fp32 block scales. Every
// shape, dtype or scale problem is an INVALID_ARGUMENT naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "core/safetensors.h"

namespace moe {

// `ref` (called `name` in errors) must have one of `dtypes` and `shape`.
absl::Status CheckQuantTensor(const TensorRef& ref, const std::string& name,
                              const std::vector<DType>& dtypes,
                              const std::vector<int64_t>& shape);

// An MXFP4 weight [out, in] from rows row0, row0 + step, ... of a tensor of
// code pairs whose rows hold `in` values (`in` / 2 bytes each) and of its
// scales (`in` / 32 E8M0 bytes a row). Shapes are the caller's to check;
// `in` must be a multiple of 32 and no scale 255 (named after `scales_name`).
absl::StatusOr<WeightTensor> GatherMxfp4Rows(std::string name,
                                             const TensorRef& pairs,
                                             const TensorRef& scales,
                                             const std::string& scales_name,
                                             int64_t row0, int64_t step,
                                             int64_t out, int64_t in);

// The fp32 factors of an E8M0 scale tensor (dtype F8_E8M0 or U8, `shape`);
// a 255 (NaN) is refused naming the element.
absl::StatusOr<std::vector<float>> E8M0Factors(
    const TensorRef& ref, const std::string& name,
    const std::vector<int64_t>& shape);

// A ModelOpt NVFP4 linear [out, in] (kernels/nvfp4_rule.h): `weight` U8
// [out, in / 2] code pairs, `scale` (its `weight_scale`) F8_E4M3
// [out, in / 16] and `scale_2` (its `weight_scale_2`) an F32 scalar ([] or
// [1]); `names` are the three tensors' names, for errors. `in` must be a
// multiple of 16, no block scale E4M3 NaN and the global scale finite.
absl::StatusOr<WeightTensor> ReadNvfp4(const TensorRef& weight,
                                       const TensorRef& scale,
                                       const TensorRef& scale_2,
                                       const std::string (&names)[3],
                                       int64_t out, int64_t in);

}  // namespace moe

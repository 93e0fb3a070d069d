// Converting between wire tensors (moe.v1.Tensor) and fp32 host buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/wire_matrix.h"
#include "moe/v1/moe.pb.h"

namespace moe {

// The element type a wire dtype names: F32, BF16 or F16; nullopt for
// DTYPE_UNSPECIFIED or an unknown value.
std::optional<DType> FromWireDType(moe::v1::DType dtype);
// The wire dtype of F32, BF16 or F16 (F32 for any other type).
moe::v1::DType ToWireDType(DType dtype);

// A checked 2-D wire tensor, viewed in place (core/wire_matrix.h). Checks
// dtype, rank, byte length and `expected_cols` (when >= 0) as
// DecodeMatrix does, and finiteness on the wire's own bits when
// `require_finite`, without converting anything.
absl::StatusOr<WireMatrix> CheckMatrix(const moe::v1::Tensor& t,
                                       const std::string& field,
                                       int64_t expected_cols,
                                       bool require_finite);

// Decodes a 2-D tensor into fp32 rows. `field` names the tensor in error
// messages (e.g. "hidden_states"). Checks the dtype, rank, byte length and
// that `expected_cols` matches (when >= 0); non-finite values are reported
// only when `require_finite`.
struct DecodedMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
};
absl::StatusOr<DecodedMatrix> DecodeMatrix(const moe::v1::Tensor& t,
                                           const std::string& field,
                                           int64_t expected_cols,
                                           bool require_finite);

// Encodes rows x cols fp32 values as `dtype` (F32, BF16 or F16).
void EncodeMatrix(const float* data, int64_t rows, int64_t cols,
                  moe::v1::DType dtype, moe::v1::Tensor* out);

}  // namespace moe

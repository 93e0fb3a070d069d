// Converting between wire tensors (moe.v1.Tensor) and fp32 host buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "moe/v1/moe.pb.h"

namespace moe {

// Bytes per element of a wire dtype; 0 for DTYPE_UNSPECIFIED or unknown.
size_t WireDTypeSize(moe::v1::DType dtype);
const char* WireDTypeName(moe::v1::DType dtype);

// A checked 2-D wire tensor, viewed in place: `data` points into the
// message it came from, which must outlive the view.
struct WireMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  moe::v1::DType dtype = moe::v1::F32;
  const char* data = nullptr;
};
// Checks dtype, rank, byte length and `expected_cols` (when >= 0) as
// DecodeMatrix does, and finiteness on the wire's own bits when
// `require_finite`, without converting anything.
absl::StatusOr<WireMatrix> CheckMatrix(const moe::v1::Tensor& t,
                                       const std::string& field,
                                       int64_t expected_cols,
                                       bool require_finite);
// Rows [first, first + count) of `m` as fp32 into `dst` (exact).
void DecodeRows(const WireMatrix& m, int64_t first, int64_t count, float* dst);

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

#include "proto/tensor_codec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/finite_check.h"

namespace moe {
std::optional<DType> FromWireDType(moe::v1::DType dtype) {
  switch (dtype) {
    case moe::v1::F32:
      return DType::kF32;
    case moe::v1::BF16:
      return DType::kBF16;
    case moe::v1::F16:
      return DType::kF16;
    default:
      return std::nullopt;
  }
}

moe::v1::DType ToWireDType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return moe::v1::BF16;
    case DType::kF16:
      return moe::v1::F16;
    default:
      return moe::v1::F32;
  }
}

absl::StatusOr<WireMatrix> CheckMatrix(const moe::v1::Tensor& t,
                                       const std::string& field,
                                       int64_t expected_cols,
                                       bool require_finite) {
  const std::optional<DType> type = FromWireDType(t.dtype());
  if (!type) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dtype: expected F32, BF16 or F16, got ",
                     t.dtype() == moe::v1::DTYPE_UNSPECIFIED
                         ? std::string("DTYPE_UNSPECIFIED")
                         : absl::StrCat(static_cast<int>(t.dtype()))));
  }
  if (t.shape_size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".shape: expected [N, H] (rank 2), got rank ", t.shape_size()));
  }
  const int64_t rows = t.shape(0), cols = t.shape(1);
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: dimensions must be >= 0, got [", rows,
                     ", ", cols, "]"));
  }
  if (expected_cols >= 0 && cols != expected_cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape[1]: expected hidden size ", expected_cols,
                     ", got ", cols));
  }
  // Bound before multiplying: rows and cols come from the client.
  if (cols > 0 && rows > (int64_t{1} << 40) / cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: [", rows, ", ", cols, "] is too large"));
  }
  const size_t esize = DTypeSize(*type);
  const uint64_t want = static_cast<uint64_t>(rows * cols) * esize;
  if (t.data().size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".data: expected ", want, " bytes (", DTypeName(*type), " [",
        rows, ", ", cols, "]), got ", t.data().size()));
  }
  WireMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = *type;
  m.data = t.data().data();
  if (require_finite) {
    const int64_t bad = FirstNonFiniteRow(*type, m.data, rows, cols);
    if (bad >= 0) {
      const int64_t col = FirstNonFiniteInRow(
          *type, m.data + static_cast<size_t>(bad * cols) * esize, cols);
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".data: non-finite value at [", bad, ", ", col, "]"));
    }
  }
  return m;
}

absl::StatusOr<DecodedMatrix> DecodeMatrix(const moe::v1::Tensor& t,
                                           const std::string& field,
                                           int64_t expected_cols,
                                           bool require_finite) {
  auto view = CheckMatrix(t, field, expected_cols, require_finite);
  if (!view.ok()) return view.status();
  DecodedMatrix m;
  m.rows = view->rows;
  m.cols = view->cols;
  m.data.resize(m.rows * m.cols);
  DecodeRows(*view, 0, m.rows, m.data.data());
  return m;
}

void EncodeMatrix(const float* data, int64_t rows, int64_t cols,
                  moe::v1::DType dtype, moe::v1::Tensor* out) {
  const DType type = FromWireDType(dtype).value_or(DType::kF32);
  out->set_dtype(ToWireDType(type));
  out->clear_shape();
  out->add_shape(rows);
  out->add_shape(cols);
  std::string* bytes = out->mutable_data();
  const size_t n = static_cast<size_t>(rows * cols);
  bytes->resize(n * DTypeSize(type));
  ConvertFromF32(type, data, n, bytes->data());
}

}  // namespace moe

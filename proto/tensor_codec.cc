#include "proto/tensor_codec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/finite_check.h"

namespace moe {
namespace {

DType ToCore(moe::v1::DType d) {
  switch (d) {
    case moe::v1::BF16:
      return DType::kBF16;
    case moe::v1::F16:
      return DType::kF16;
    default:
      return DType::kF32;
  }
}

}  // namespace

size_t WireDTypeSize(moe::v1::DType dtype) {
  switch (dtype) {
    case moe::v1::F32:
      return 4;
    case moe::v1::BF16:
    case moe::v1::F16:
      return 2;
    default:
      return 0;
  }
}

const char* WireDTypeName(moe::v1::DType dtype) {
  switch (dtype) {
    case moe::v1::F32:
      return "F32";
    case moe::v1::BF16:
      return "BF16";
    case moe::v1::F16:
      return "F16";
    default:
      return "DTYPE_UNSPECIFIED";
  }
}

absl::StatusOr<WireMatrix> CheckMatrix(const moe::v1::Tensor& t,
                                       const std::string& field,
                                       int64_t expected_cols,
                                       bool require_finite) {
  const size_t esize = WireDTypeSize(t.dtype());
  if (esize == 0) {
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
  const uint64_t want = static_cast<uint64_t>(rows * cols) * esize;
  if (t.data().size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".data: expected ", want, " bytes (", WireDTypeName(t.dtype()),
        " [", rows, ", ", cols, "]), got ", t.data().size()));
  }
  WireMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = t.dtype();
  m.data = t.data().data();
  if (require_finite) {
    const DType core = ToCore(t.dtype());
    const int64_t bad = FirstNonFiniteRow(core, m.data, rows, cols);
    if (bad >= 0) {
      const int64_t col = FirstNonFiniteInRow(
          core, m.data + static_cast<size_t>(bad * cols) * esize, cols);
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".data: non-finite value at [", bad, ", ", col, "]"));
    }
  }
  return m;
}

void DecodeRows(const WireMatrix& m, int64_t first, int64_t count, float* dst) {
  const size_t esize = WireDTypeSize(m.dtype);
  const char* src = m.data + static_cast<size_t>(first * m.cols) * esize;
  const size_t n = static_cast<size_t>(count * m.cols);
  ConvertToF32(ToCore(m.dtype), src, n, dst);
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
  if (WireDTypeSize(dtype) == 0) dtype = moe::v1::F32;
  out->set_dtype(dtype);
  out->clear_shape();
  out->add_shape(rows);
  out->add_shape(cols);
  std::string* bytes = out->mutable_data();
  const size_t n = static_cast<size_t>(rows * cols);
  bytes->resize(n * WireDTypeSize(dtype));
  ConvertFromF32(ToCore(dtype), data, n, bytes->data());
}

}  // namespace moe

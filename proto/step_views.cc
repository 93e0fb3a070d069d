#include "proto/step_views.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// Whether `reply`'s rows are [rows, hidden] of `width`-byte elements.
bool RowsAre(const StepReply& reply, int64_t rows, int64_t hidden,
             size_t width) {
  return reply.shape.size() == 2 && reply.shape[0] == rows &&
         reply.shape[1] == hidden &&
         reply.data.size() == static_cast<size_t>(rows * hidden) * width;
}

}  // namespace

absl::Status DecodeStepResult(const StepReply& reply, int rank, int64_t tokens,
                              int64_t H, float* y) {
  const bool known = reply.dtype == DType::kF32 || reply.dtype == DType::kBF16;
  const size_t width = known ? DTypeSize(*reply.dtype) : 0;
  if (!known || !RowsAre(reply, tokens, H, width)) {
    return absl::InternalError(
        absl::StrCat("worker rank ", rank, " returned a malformed result"));
  }
  const size_t count = static_cast<size_t>(tokens * H);
  if (width == 2) {
    ConvertToF32(DType::kBF16, reply.data.data(), count, y);
  } else if (count > 0) {
    std::memcpy(y, reply.data.data(), count * 4);
  }
  return absl::OkStatus();
}

absl::Status DecodeDirectResult(const StepReply& reply, int rank, int64_t rows,
                                int64_t H, ElementType* type,
                                std::vector<char>* dst, int64_t first_row) {
  const bool known = reply.dtype == DType::kF32 || reply.dtype == DType::kBF16;
  const ElementType t =
      reply.dtype == DType::kBF16 ? ElementType::kBF16 : ElementType::kF32;
  const size_t row_bytes = static_cast<size_t>(H) * DTypeSize(t);
  if (!known || !RowsAre(reply, rows, H, DTypeSize(t))) {
    return absl::InternalError(absl::StrCat(
        "worker rank ", rank, " returned a malformed direct-step result"));
  }
  *type = t;
  const size_t need = (first_row + rows) * row_bytes;
  if (dst->size() < need) dst->resize(need);
  if (rows > 0) {
    std::memcpy(dst->data() + first_row * row_bytes, reply.data.data(),
                rows * row_bytes);
  }
  return absl::OkStatus();
}

}  // namespace moe

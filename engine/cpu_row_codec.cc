#include "engine/cpu_row_codec.h"

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/fp8_rows.h"
#include "engine/row_transport.h"

namespace moe {
namespace {

// Rows [n] of width `hidden` through `row_fn(first, count)` on `threads`
// threads; small steps stay on the calling thread (a parallel region costs
// more than converting them).
template <typename RowFn>
void ForRowBlocks(int64_t n, int64_t hidden, int threads, RowFn row_fn) {
  constexpr int64_t kSerialElems = 1 << 16;
  if (threads <= 1 || n * hidden < kSerialElems) {
    row_fn(0, n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    if (e > b) row_fn(b, e - b);
  }
}

absl::Status NotPacked(DispatchDType dispatch) {
  return absl::InternalError(absl::StrCat("rows packed for a dispatch of ",
                                          DispatchDTypeName(dispatch)));
}

}  // namespace

absl::Status CpuRowCodec::PackRows(const EpStepInput& in, const EpPlan& p,
                                   const void* gathered, void* packed) {
  const DispatchDType dispatch = p.dispatch;
  if (dispatch != DispatchDType::kFp8 && dispatch != DispatchDType::kBf16) {
    return NotPacked(dispatch);
  }
  const int64_t H = hidden_;
  const auto* rows = static_cast<const float*>(gathered);
  auto* out = static_cast<uint8_t*>(packed);
  const int64_t bytes = DispatchRowBytes(dispatch, ElementType::kF32, H);
  ForRowBlocks(p.sent, H, threads_, [&](int64_t first, int64_t count) {
    for (int64_t j = first; j < first + count; ++j) {
      const float* row =
          rows_from_x_ ? in.rows + p.src_row[j] * H : rows + j * H;
      if (dispatch == DispatchDType::kFp8) {
        QuantizeFp8Rows(row, 1, H, out + j * bytes);
      } else {
        ConvertFromF32(DType::kBF16, row, H, out + j * bytes);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuRowCodec::UnpackRows(const EpPlan& p, const void* packed,
                                     void* rows) {
  const DispatchDType dispatch = p.dispatch;
  const int64_t n = p.arrived, H = hidden_;
  const auto* in = static_cast<const uint8_t*>(packed);
  auto* x = static_cast<float*>(rows);
  const int64_t bytes = DispatchRowBytes(dispatch, ElementType::kF32, H);
  if (dispatch == DispatchDType::kFp8) {
    ForRowBlocks(n, H, threads_, [&](int64_t first, int64_t count) {
      DequantizeFp8Rows(in + first * bytes, count, H, x + first * H);
    });
  } else if (dispatch == DispatchDType::kBf16) {
    ForRowBlocks(n, H, threads_, [&](int64_t first, int64_t count) {
      ConvertToF32(DType::kBF16, in + first * bytes, count * H, x + first * H);
    });
  } else {
    return NotPacked(dispatch);
  }
  return absl::OkStatus();
}

absl::Status CpuRowCodec::PackOutputs(const EpPlan& p, const void* out,
                                      void* packed) {
  const int64_t H = hidden_;
  const auto* src = static_cast<const float*>(out);
  auto* dst = static_cast<uint16_t*>(packed);
  ForRowBlocks(p.received, H, threads_, [&](int64_t first, int64_t count) {
    ConvertFromF32(DType::kBF16, src + first * H, count * H, dst + first * H);
  });
  return absl::OkStatus();
}

}  // namespace moe

#include "proto/step_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// Writes x as bf16 into `out` when every value is one (its low 16 bits are
// zero: a bf16 client's rows, widened); false, with `out` untouched, when a
// value is not. The check reads first and stops at the first such value
// (the first one, for fp32 data), so fp32 rows cost no conversion.
bool AsBf16IfExact(const float* x, size_t count, std::string* out) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    if ((bits & 0xFFFFu) != 0) return false;
  }
  out->resize(count * 2);
  auto* dst = reinterpret_cast<uint16_t*>(out->data());
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    dst[i] = static_cast<uint16_t>(bits >> 16);
  }
  return true;
}

// dst = src widened from bf16 (exact).
void Bf16ToF32Rows(const char* src, size_t count, float* dst) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

}  // namespace

void EncodeStep(uint64_t step_id, int64_t layer, const float* x, int64_t tokens,
                int64_t H, int64_t slots, absl::Span<const int32_t> expert_ids,
                absl::Span<const float> weights,
                absl::Span<const int64_t> counts, int64_t timeout_ms,
                moe::v1::Step* step) {
  step->Clear();
  step->set_step_id(step_id);
  step->set_layer(static_cast<int32_t>(layer));
  step->set_slots(static_cast<int32_t>(slots));
  step->set_timeout_ms(timeout_ms);
  auto* rows = step->mutable_rows();
  rows->add_shape(tokens);
  rows->add_shape(H);
  const size_t count = static_cast<size_t>(tokens * H);
  if (AsBf16IfExact(x, count, rows->mutable_data())) {
    rows->set_dtype(moe::v1::BF16);
  } else {
    rows->set_dtype(moe::v1::F32);
    rows->set_data(reinterpret_cast<const char*>(x), count * sizeof(float));
  }
  step->mutable_expert_ids()->Assign(expert_ids.begin(), expert_ids.end());
  step->mutable_weights()->Assign(weights.begin(), weights.end());
  step->mutable_counts()->Assign(counts.begin(), counts.end());
}

absl::Status DecodeStep(const moe::v1::Step& step, int64_t H,
                        std::vector<float>* scratch, EpStepInput* in) {
  const auto& rows = step.rows();
  const size_t width = rows.dtype() == moe::v1::F32    ? 4
                       : rows.dtype() == moe::v1::BF16 ? 2
                                                       : 0;
  if (width == 0 || rows.shape_size() != 2 || rows.shape(1) != H ||
      rows.shape(0) < 0 ||
      rows.data().size() != static_cast<size_t>(rows.shape(0) * H) * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step.step_id(), ": rows must be F32 or BF16 [N, ", H, "]"));
  }
  in->step_id = step.step_id();
  in->layer = step.layer();
  in->tokens = rows.shape(0);
  in->slots = step.slots();
  const char* data = rows.data().data();
  const size_t count = static_cast<size_t>(in->tokens * H);
  if (width == 4 && reinterpret_cast<uintptr_t>(data) % alignof(float) == 0) {
    in->rows = reinterpret_cast<const float*>(data);
  } else {
    // Grows only: a steady stream of steps stops allocating.
    if (scratch->size() < count) scratch->resize(count);
    if (width == 2) {
      Bf16ToF32Rows(data, count, scratch->data());
    } else if (count > 0) {
      std::memcpy(scratch->data(), data, count * 4);
    }
    in->rows = scratch->data();
  }
  in->expert_ids =
      absl::MakeConstSpan(step.expert_ids().data(), step.expert_ids_size());
  in->weights = absl::MakeConstSpan(step.weights().data(), step.weights_size());
  in->counts = absl::MakeConstSpan(step.counts().data(), step.counts_size());
  in->timeout =
      std::chrono::milliseconds(std::max<int64_t>(step.timeout_ms(), 1));
  return absl::OkStatus();
}

void EncodeStepResult(const float* y, int64_t tokens, int64_t H,
                      const EpStepTimes& t, moe::v1::StepResult* result) {
  // Results stay fp32: the router adds the shared expert in fp32, and a
  // token's bits must not depend on the number of workers.
  auto* out = result->mutable_rows();
  out->set_dtype(moe::v1::F32);
  out->clear_shape();
  out->add_shape(tokens);
  out->add_shape(H);
  out->set_data(reinterpret_cast<const char*>(y),
                static_cast<size_t>(tokens * H) * sizeof(float));
  result->set_dispatch_us(t.dispatch_us);
  result->set_experts_us(t.experts_us);
  result->set_combine_us(t.combine_us);
  result->set_expert_rows(t.expert_rows);
}

absl::Status DecodeStepResult(const moe::v1::StepResult& res, int rank,
                              int64_t tokens, int64_t H, float* y) {
  const auto& rows = res.rows();
  if (rows.dtype() != moe::v1::F32 || rows.shape_size() != 2 ||
      rows.shape(0) != tokens || rows.shape(1) != H ||
      rows.data().size() != static_cast<size_t>(tokens * H) * 4) {
    return absl::InternalError(
        absl::StrCat("worker rank ", rank, " returned a malformed result"));
  }
  if (!rows.data().empty()) {
    std::memcpy(y, rows.data().data(), rows.data().size());
  }
  return absl::OkStatus();
}

}  // namespace moe

#include "proto/step_codec.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/vector_clones.h"
#include "proto/tensor_codec.h"

namespace moe {
namespace {

// Bytes per element of a step's rows: F32 or BF16; 0 for any other type.
size_t RowWidth(moe::v1::DType dtype) {
  const std::optional<DType> t = FromWireDType(dtype);
  return t == DType::kF32 || t == DType::kBF16 ? DTypeSize(*t) : 0;
}

// Sets `out` to exactly `bytes` bytes. The string is the reused message's:
// at the same size as the last step it is only overwritten, with no
// zero-fill of a fresh resize.
char* SizeTo(std::string* out, size_t bytes) {
  if (out->size() != bytes) out->resize(bytes);
  return out->data();
}

// dst[i] = the top half of x[i]'s bits; returns the OR of the low halves
// (0: every value was a bf16). The baseline build narrows one value at a
// time, hence the vector builds.
MOE_VECTOR_CLONES uint32_t TopHalves(const float* x, size_t count,
                                     uint16_t* dst) {
  uint32_t low = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    low |= bits & 0xFFFFu;
    dst[i] = static_cast<uint16_t>(bits >> 16);
  }
  return low;
}

// Writes x as bf16 into `out` when every value is one (its low 16 bits are
// zero: a bf16 client's rows, widened), in one pass that narrows and checks
// together, a block at a time so that fp32 rows stop at their first block;
// false, with `out` in an unspecified state, when a value is not.
bool AsBf16IfExact(const float* x, size_t count, std::string* out) {
  constexpr size_t kBlock = 4096;
  // Check the first block before sizing `out`: fp32 rows fail here.
  uint32_t low = 0;
  const size_t head = std::min(count, kBlock);
  for (size_t i = 0; i < head; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    low |= bits & 0xFFFFu;
  }
  if (low != 0) return false;
  auto* dst = reinterpret_cast<uint16_t*>(SizeTo(out, count * 2));
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t e = std::min(count, b + kBlock);
    if (TopHalves(x + b, e - b, dst + b) != 0) return false;
  }
  return true;
}

void SetStepTimes(const EpStepTimes& t, moe::v1::StepResult* result) {
  result->set_dispatch_us(t.dispatch_us);
  result->set_experts_us(t.experts_us);
  result->set_combine_us(t.combine_us);
  result->set_gather_us(t.gather_us);
  result->set_sum_us(t.sum_us);
  result->set_expert_rows(t.expert_rows);
}

}  // namespace

void EncodeStep(const StepContent& content, moe::v1::Step* step) {
  const EpStepInput& in = content.in;
  const int64_t H = content.hidden;
  // Not Clear(): the rows' string keeps its size for the next step of the
  // same shape (see SizeTo).
  step->set_generation(0);
  step->set_step_id(in.step_id);
  step->set_layer(static_cast<int32_t>(in.layer));
  step->set_slots(static_cast<int32_t>(in.slots));
  step->set_timeout_ms(in.timeout.count());
  step->set_result_dtype(content.bf16_result ? moe::v1::BF16 : moe::v1::F32);
  step->set_dispatch_dtype(
      in.dispatch == DispatchDType::kFp8    ? moe::v1::DISPATCH_FP8
      : in.dispatch == DispatchDType::kBf16 ? moe::v1::DISPATCH_BF16
                                            : moe::v1::DISPATCH_ROW_TYPE);
  step->set_placement_epoch(content.placement_epoch);
  step->set_direct(content.direct);
  const int64_t tokens = in.tokens;
  const float* x = in.rows;
  auto* rows = step->mutable_rows();
  rows->clear_shape();
  rows->add_shape(tokens);
  rows->add_shape(H);
  const size_t count = static_cast<size_t>(tokens * H);
  if (AsBf16IfExact(x, count, rows->mutable_data())) {
    rows->set_dtype(moe::v1::BF16);
  } else {
    rows->set_dtype(moe::v1::F32);
    if (count > 0) {
      std::memcpy(SizeTo(rows->mutable_data(), count * sizeof(float)), x,
                  count * sizeof(float));
    } else {
      rows->clear_data();
    }
  }
  step->mutable_expert_ids()->Assign(in.expert_ids.begin(),
                                     in.expert_ids.end());
  step->mutable_all_expert_ids()->Assign(in.all_expert_ids.begin(),
                                         in.all_expert_ids.end());
  step->mutable_weights()->Assign(in.weights.begin(), in.weights.end());
  step->mutable_counts()->Assign(in.counts.begin(), in.counts.end());
}

absl::Status DecodeStep(const moe::v1::Step& step, int64_t H,
                        std::vector<float>* scratch, EpStepInput* in) {
  const auto& rows = step.rows();
  const size_t width = RowWidth(rows.dtype());
  if (width == 0 || rows.shape_size() != 2 || rows.shape(1) != H ||
      rows.shape(0) < 0 ||
      rows.data().size() != static_cast<size_t>(rows.shape(0) * H) * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step.step_id(), ": rows must be F32 or BF16 [N, ", H, "]"));
  }
  switch (step.dispatch_dtype()) {
    case moe::v1::DISPATCH_ROW_TYPE:
      in->dispatch = DispatchDType::kRowType;
      break;
    case moe::v1::DISPATCH_BF16:
      in->dispatch = DispatchDType::kBf16;
      break;
    case moe::v1::DISPATCH_FP8:
      in->dispatch = DispatchDType::kFp8;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id(),
                       ": dispatch_dtype must be ROW_TYPE, BF16 "
                       "or FP8, got ",
                       static_cast<int>(step.dispatch_dtype())));
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
      ConvertToF32(DType::kBF16, data, count, scratch->data());
    } else if (count > 0) {
      std::memcpy(scratch->data(), data, count * 4);
    }
    in->rows = scratch->data();
  }
  in->expert_ids =
      absl::MakeConstSpan(step.expert_ids().data(), step.expert_ids_size());
  in->all_expert_ids = absl::MakeConstSpan(step.all_expert_ids().data(),
                                           step.all_expert_ids_size());
  in->weights = absl::MakeConstSpan(step.weights().data(), step.weights_size());
  in->counts = absl::MakeConstSpan(step.counts().data(), step.counts_size());
  in->timeout =
      std::chrono::milliseconds(std::max<int64_t>(step.timeout_ms(), 1));
  return absl::OkStatus();
}

void EncodeStepResult(const float* y, int64_t tokens, int64_t H,
                      const EpStepTimes& t, moe::v1::DType result_dtype,
                      moe::v1::StepResult* result) {
  // F32 unless the step asked for bf16: the router adds the shared expert
  // in fp32, and a token's bits must not depend on the number of workers
  // (the router's in-process path rounds to bf16 exactly as here).
  auto* out = result->mutable_rows();
  out->clear_shape();
  out->add_shape(tokens);
  out->add_shape(H);
  const size_t count = static_cast<size_t>(tokens * H);
  std::string* data = out->mutable_data();
  if (result_dtype == moe::v1::BF16) {
    out->set_dtype(moe::v1::BF16);
    ConvertFromF32(DType::kBF16, y, count, SizeTo(data, count * 2));
  } else {
    out->set_dtype(moe::v1::F32);
    if (count > 0) {
      std::memcpy(SizeTo(data, count * sizeof(float)), y,
                  count * sizeof(float));
    } else {
      data->clear();
    }
  }
  SetStepTimes(t, result);
}

void EncodeDirectResult(const DirectOutputs& o, int64_t tokens, int64_t S,
                        int64_t H, const EpStepTimes& t,
                        moe::v1::StepResult* result) {
  const size_t row_bytes = static_cast<size_t>(H) * DTypeSize(o.type);
  int64_t rows = 0;
  for (int64_t i = 0; i < tokens * S; ++i) rows += o.slot_row[i] >= 0;
  auto* out = result->mutable_rows();
  out->clear_shape();
  out->add_shape(rows);
  out->add_shape(H);
  out->set_dtype(o.type == ElementType::kBF16 ? moe::v1::BF16 : moe::v1::F32);
  char* dst = SizeTo(out->mutable_data(), rows * row_bytes);
  const char* src = static_cast<const char*>(o.rows);
  for (int64_t i = 0; i < tokens * S; ++i) {
    if (o.slot_row[i] < 0) continue;
    std::memcpy(dst, src + o.slot_row[i] * row_bytes, row_bytes);
    dst += row_bytes;
  }
  SetStepTimes(t, result);
}

WorkerStageTimes DecodeStepTimes(const moe::v1::StepResult& r, int rank) {
  WorkerStageTimes w;
  w.rank = rank;
  w.decode_us = r.decode_us();
  w.gather_us = r.gather_us();
  w.dispatch_wait_us = r.dispatch_us() - r.gather_us();
  w.experts_us = r.experts_us();
  w.combine_wait_us = r.combine_us() - r.sum_us();
  w.sum_us = r.sum_us();
  w.step_us = r.step_us();
  return w;
}

StepReply ViewStepResult(const moe::v1::StepResult& r) {
  StepReply reply;
  reply.generation = r.generation();
  reply.step_id = r.step_id();
  reply.error_code = r.error_code();
  reply.error_message = r.error_message();
  reply.collectives_broken = r.collectives_broken();
  reply.dtype = FromWireDType(r.rows().dtype());
  reply.shape =
      absl::MakeConstSpan(r.rows().shape().data(), r.rows().shape_size());
  reply.data = r.rows().data();
  reply.times = DecodeStepTimes(r, -1);
  return reply;
}

}  // namespace moe

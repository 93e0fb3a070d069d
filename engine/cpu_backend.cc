#include "engine/cpu_backend.h"

#include <malloc.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/fp8_rows.h"
#include "core/status_macros.h"
#include "kernels/cpu/dispatch.h"

namespace moe {
namespace {

namespace kc = kernels::cpu;

// Grows `v` to hold at least `n` elements; never shrinks, so a steady
// stream of steps stops allocating after the largest one.
template <typename T>
T* Reserve(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

}  // namespace

absl::Status CpuBackend::Load(const ModelSource& source,
                              const LoadOptions& options, int64_t max_tokens) {
  auto layers = std::make_shared<Layers>();
  LoadOptions opts = options;
  opts.num_threads = threads_;
  for (int64_t layer : source.info().moe_layers) {
    if (opts.only_layer >= 0 && layer != opts.only_layer) continue;
    MOE_ASSIGN_OR_RETURN((*layers)[layer],
                         LoadLayerWeights(source, layer, opts));
  }
  layers_ = std::move(layers);
  config_ = source.info().layer;
  max_tokens_ = max_tokens;
  // Converting and quantising at load staged every expert in fp32 on each
  // loader thread; glibc keeps such freed blocks in its heaps (the service
  // raises its trim threshold on purpose), so without this the process holds
  // ~100 MiB more than its weights for good.
  malloc_trim(0);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExpertBackend>> CpuBackend::Fork() const {
  auto b = std::make_unique<CpuBackend>(threads_);
  b->layers_ = layers_;
  b->config_ = config_;
  b->max_tokens_ = max_tokens_;
  return std::unique_ptr<ExpertBackend>(std::move(b));
}

bool CpuBackend::HasLayer(int64_t layer) const {
  return layers_->count(layer) > 0;
}

const LayerWeights* CpuBackend::layer(int64_t layer) const {
  auto it = layers_->find(layer);
  return it == layers_->end() ? nullptr : it->second.get();
}

absl::StatusOr<const LayerWeights*> CpuBackend::Find(int64_t layer) const {
  const LayerWeights* w = this->layer(layer);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no weights for layer ", layer, " on this process"));
  }
  return w;
}

absl::Status CpuBackend::CheckLayer(int64_t layer, bool need_gate,
                                    bool need_shared,
                                    bool need_all_experts) const {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  if (need_gate && !w->has_gate) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer, " was loaded without its gate"));
  }
  if (need_shared && w->config.has_shared() && !w->has_shared) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer, " was loaded without its shared expert"));
  }
  if (need_all_experts &&
      (w->expert_begin != 0 || w->expert_end != w->config.num_experts ||
       w->num_local_experts() != w->config.num_experts)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "single-process layer ", layer, " needs all ", w->config.num_experts,
        " experts loaded, has [", w->expert_begin, ", ", w->expert_end, ")"));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Route(int64_t layer, const float* x, int64_t n,
                               absl::Span<const int64_t> segment_ends,
                               Routing* routing) {
  return RouteTokens(layer, x, n, segment_ends, {}, routing);
}

absl::Status CpuBackend::RouteTokens(int64_t layer, const float* x, int64_t n,
                                     absl::Span<const int64_t> segment_ends,
                                     absl::Span<const int64_t> token_ids,
                                     Routing* routing) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return router_.Route(*w, x, n, segment_ends, token_ids, threads_, routing);
}

absl::Status CpuBackend::Shared(int64_t layer, const float* x, int64_t n,
                                float* out) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return runner_.RunShared(*w, x, n, out, threads_);
}

absl::Status CpuBackend::Prepare(const EpPlan& p) {
  const int64_t H = config_.hidden;
  Reserve(send_, p.sent * H);
  Reserve(recv_, p.arrived * H);
  Reserve(out_, p.received * H);
  Reserve(back_, p.home * H);
  Reserve(in_rows_, p.received);
  Reserve(out_rows_, p.received);
  if (p.dispatch != DispatchDType::kRowType) {
    const int64_t bytes = DispatchRowBytes(p.dispatch, row_type(), H);
    SetBuffer(EpBuffer::kSendPacked, Reserve(send_packed_, p.sent * bytes));
    SetBuffer(EpBuffer::kRecvPacked, Reserve(recv_packed_, p.arrived * bytes));
    // Expert outputs home as bf16 (PacksOutputs).
    SetBuffer(EpBuffer::kOutPacked, Reserve(out_packed_, p.received * H));
    SetBuffer(EpBuffer::kBackPacked, Reserve(back_packed_, p.home * H));
  }
  // Host buffers are never staged: kStageSend and kStageRecv stay null.
  SetBuffer(EpBuffer::kSend, send_.data());
  SetBuffer(EpBuffer::kRecv, recv_.data());
  SetBuffer(EpBuffer::kOut, out_.data());
  SetBuffer(EpBuffer::kBack, back_.data());
  return absl::OkStatus();
}

absl::Status CpuBackend::Gather(const EpStepInput& in, const EpPlan& p,
                                bool /*x_resident: host rows are used as they
                                       are*/
                                ,
                                bool rows_stay) {
  const int64_t H = config_.hidden;
  // Rows that go nowhere and are not scaled need no copy: the experts read
  // them from x by pointer.
  in_place_x_ = rows_stay && !config_.score_before_experts ? in.rows : nullptr;
  if (in_place_x_ != nullptr) return absl::OkStatus();
  // Rows that cross packed (bf16, FP8) and are not scaled are packed straight
  // from x (PackRows): an fp32 copy in between would be written and read
  // once more.
  if (PacksFromX(p)) return absl::OkStatus();
  const float* scale = nullptr;
  if (config_.score_before_experts) {
    float* s = Reserve(scale_, p.sent);
    for (int64_t j = 0; j < p.sent; ++j) s[j] = in.weights[p.order[j]];
    scale = s;
  }
  kc::GatherRows(in.rows, H, p.src_row.data(), scale, p.sent, send_.data(),
                 threads_);
  return absl::OkStatus();
}

absl::Status CpuBackend::RunExperts(int64_t layer, const EpPlan& p,
                                    const void* in, void* out) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  const int64_t H = config_.hidden;
  // Grouped by expert through pointers: a dispatched row is read by each of
  // its slots here, and every output lands in its row of the way back.
  const float* src = static_cast<const float*>(in);
  float* dst = static_cast<float*>(out);
  const bool in_place = in_place_x_ != nullptr && in == send_.data();
  for (int64_t i = 0; i < p.received; ++i) {
    const int64_t row = p.grouped[i];
    in_rows_[i] = in_place ? in_place_x_ + p.src_row[row] * H : src + row * H;
    out_rows_[i] = dst + p.out_row[i] * H;
  }
  return runner_.RunRouted(*w, p.expert_offsets, in_rows_.data(),
                           out_rows_.data(), threads_);
}

absl::Status CpuBackend::Combine(const EpStepInput& in, const EpPlan& p,
                                 const void* back, float* y) {
  const float* w = config_.score_before_experts ? nullptr : in.weights.data();
  if (PacksOutputs(p.dispatch, row_type())) {
    kc::CombineSlots(p.tokens, p.slots, config_.hidden, w, p.slot_row.data(),
                     static_cast<const uint16_t*>(back), y, threads_);
  } else {
    kc::CombineSlots(p.tokens, p.slots, config_.hidden, w, p.slot_row.data(),
                     static_cast<const float*>(back), y, threads_);
  }
  return absl::OkStatus();
}

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

}  // namespace

bool CpuBackend::PacksFromX(const EpPlan& p) const {
  return p.dispatch != DispatchDType::kRowType && !config_.score_before_experts;
}

absl::Status CpuBackend::PackRows(const EpStepInput& in, const EpPlan& p,
                                  void* packed) {
  const DispatchDType dispatch = p.dispatch;
  if (dispatch != DispatchDType::kFp8 && dispatch != DispatchDType::kBf16) {
    return ExpertBackend::PackRows(in, p, packed);
  }
  const int64_t H = config_.hidden;
  // Row j: x's row src_row[j], or (scaled rows) Gather's row j of kSend.
  const bool from_x = PacksFromX(p);
  auto* out = static_cast<uint8_t*>(packed);
  const int64_t bytes = DispatchRowBytes(dispatch, row_type(), H);
  ForRowBlocks(p.sent, H, threads_, [&](int64_t first, int64_t count) {
    for (int64_t j = first; j < first + count; ++j) {
      const float* row =
          from_x ? in.rows + p.src_row[j] * H : send_.data() + j * H;
      if (dispatch == DispatchDType::kFp8) {
        QuantizeFp8Rows(row, 1, H, out + j * bytes);
      } else {
        ConvertFromF32(DType::kBF16, row, H, out + j * bytes);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::UnpackRows(const EpPlan& p, const void* packed,
                                    void* rows) {
  const DispatchDType dispatch = p.dispatch;
  const int64_t n = p.arrived;
  const int64_t H = config_.hidden;
  const auto* in = static_cast<const uint8_t*>(packed);
  auto* x = static_cast<float*>(rows);
  const int64_t bytes = DispatchRowBytes(dispatch, row_type(), H);
  if (dispatch == DispatchDType::kFp8) {
    ForRowBlocks(n, H, threads_, [&](int64_t first, int64_t count) {
      DequantizeFp8Rows(in + first * bytes, count, H, x + first * H);
    });
  } else if (dispatch == DispatchDType::kBf16) {
    ForRowBlocks(n, H, threads_, [&](int64_t first, int64_t count) {
      ConvertToF32(DType::kBF16, in + first * bytes, count * H, x + first * H);
    });
  } else {
    return ExpertBackend::UnpackRows(p, packed, rows);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PackOutputs(const EpPlan& p, const void* out,
                                     void* packed) {
  const int64_t H = config_.hidden;
  const auto* src = static_cast<const float*>(out);
  auto* dst = static_cast<uint16_t*>(packed);
  ForRowBlocks(p.received, H, threads_, [&](int64_t first, int64_t count) {
    ConvertFromF32(DType::kBF16, src + first * H, count * H, dst + first * H);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(const void* src, void* dst, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyFromHost(const void* src, void* dst,
                                      size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

void CpuBackend::Mark(EpMark mark) {
  marks_[static_cast<int>(mark)] = std::chrono::steady_clock::now();
}

double CpuBackend::ElapsedUs(EpMark from, EpMark to) const {
  return std::chrono::duration<double, std::micro>(
             marks_[static_cast<int>(to)] - marks_[static_cast<int>(from)])
      .count();
}

}  // namespace moe

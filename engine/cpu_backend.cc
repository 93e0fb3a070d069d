#include "engine/cpu_backend.h"

#include <malloc.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/layer_shard.h"
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
  codec_ = CpuRowCodec(threads_, config_.expert_width(),
                       !config_.score_before_experts);
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
  b->codec_ = codec_;
  return std::unique_ptr<ExpertBackend>(std::move(b));
}

const LayerWeights* CpuBackend::layer(int64_t layer) const {
  auto it = layers_->find(layer);
  return it == layers_->end() ? nullptr : it->second.get();
}

const float* CpuBackend::OutputBias(int64_t layer) const {
  const LayerWeights* w = this->layer(layer);
  return w == nullptr || w->output_bias.empty() ? nullptr
                                                : w->output_bias.data();
}

absl::StatusOr<const LayerWeights*> CpuBackend::Find(int64_t layer) const {
  const LayerWeights* w = this->layer(layer);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no weights for layer ", layer, " on this process"));
  }
  return w;
}

absl::StatusOr<LayerShard> CpuBackend::Shard(int64_t layer) const {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return ShardOf(*w);
}

absl::Status CpuBackend::Route(int64_t layer, const float* x, int64_t n,
                               absl::Span<const int64_t> segment_ends,
                               Routing* routing) {
  return RouteTokens(layer, x, {.n = n, .segment_ends = segment_ends}, routing);
}

absl::Status CpuBackend::RouteTokens(int64_t layer, const float* x,
                                     const RouteRows& rows, Routing* routing) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return router_.Route(*w, x, rows, threads_, routing);
}

absl::Status CpuBackend::Shared(int64_t layer, const float* x, int64_t n,
                                float* out) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return runner_.RunShared(*w, x, n, out, threads_);
}

absl::StatusOr<const float*> CpuBackend::EnterExperts(int64_t layer,
                                                      const float* x,
                                                      int64_t n) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return frame_.Enter(*w, x, n, threads_);
}

absl::Status CpuBackend::LeaveExperts(int64_t layer, float* s, int64_t n,
                                      float* y) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, Find(layer));
  return frame_.Leave(*w, s, n, y, threads_);
}

absl::Status CpuBackend::Prepare(const EpPlan& p) {
  const int64_t H = config_.expert_width();
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
                                const RowTransport& transport) {
  const int64_t H = config_.expert_width();
  const bool scaled = config_.score_before_experts;
  // Rows that go nowhere and are not scaled need no copy: the experts read
  // them from x by pointer.
  in_place_x_ = transport.rows_in_place && !scaled ? in.rows : nullptr;
  if (in_place_x_ != nullptr) return absl::OkStatus();
  // Rows that travel packed (bf16, FP8) and are not scaled are packed
  // straight from x (codec_).
  if (transport.dispatch.encode && !scaled) return absl::OkStatus();
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
  const int64_t H = config_.expert_width();
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
    kc::CombineSlots(p.tokens, p.slots, config_.expert_width(), w,
                     p.slot_row.data(), static_cast<const uint16_t*>(back), y,
                     threads_);
  } else {
    kc::CombineSlots(p.tokens, p.slots, config_.expert_width(), w,
                     p.slot_row.data(), static_cast<const float*>(back), y,
                     threads_);
  }
  return absl::OkStatus();
}

}  // namespace moe

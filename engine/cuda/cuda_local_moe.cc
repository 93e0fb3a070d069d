#include "engine/cuda/cuda_local_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cuda/kernels.h"

namespace moe {
namespace kcu = kernels::cuda;

int64_t MaxExpertRows(const MoeLayerConfig& c, int64_t tokens) {
  const int64_t per_token = std::max<int64_t>(
      c.top_k, static_cast<int64_t>(std::ceil(c.capacity_factor)));
  return tokens * per_token + c.num_experts;
}

int64_t MaxSlots(const MoeLayerConfig& c) {
  return c.routing == RoutingMode::kExpertChoice ? c.num_experts : c.top_k;
}

absl::StatusOr<std::unique_ptr<CudaLocalMoe>> CudaLocalMoe::Create(
    int device, const MoeLayerConfig& c, int64_t max_tokens) {
  MOE_CUDA_OK(cudaSetDevice(device));
  auto m = std::unique_ptr<CudaLocalMoe>(new CudaLocalMoe());
  m->device_ = device;
  m->config_ = c;
  m->max_tokens_ = max_tokens;
  m->max_rows_ = MaxExpertRows(c, max_tokens);
  m->max_slots_ = max_tokens * MaxSlots(c);
  const int64_t H = c.hidden, T = max_tokens, R = m->max_rows_,
                S = m->max_slots_;
  MOE_CUDA_OK(cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking));
  for (auto& e : m->marks_) MOE_CUDA_OK(cudaEventCreate(&e));
  MOE_ASSIGN_OR_RETURN(m->lt_, LtMatmul::Create());
  MOE_ASSIGN_OR_RETURN(m->router_, CudaRouter::Create(c, T));
  MOE_ASSIGN_OR_RETURN(m->experts_,
                       CudaExperts::Create(std::max(R, T), H,
                                           std::max(c.inter, c.shared_inter)));
  MOE_ASSIGN_OR_RETURN(m->x_, DeviceBuffer::Allocate(T * H * 4));
  MOE_ASSIGN_OR_RETURN(m->xb_, DeviceBuffer::Allocate(T * H * 2));
  MOE_ASSIGN_OR_RETURN(m->perm_, DeviceBuffer::Allocate(R * H * 2));
  MOE_ASSIGN_OR_RETURN(m->out_, DeviceBuffer::Allocate(R * H * 2));
  MOE_ASSIGN_OR_RETURN(m->y_, DeviceBuffer::Allocate(T * H * 4));
  MOE_ASSIGN_OR_RETURN(m->shared_out_, DeviceBuffer::Allocate(T * H * 4));
  MOE_ASSIGN_OR_RETURN(m->gate_logit_, DeviceBuffer::Allocate(T * 4));
  MOE_ASSIGN_OR_RETURN(m->src_row_, DeviceBuffer::Allocate(R * 4));
  MOE_ASSIGN_OR_RETURN(m->scale_, DeviceBuffer::Allocate(R * 4));
  MOE_ASSIGN_OR_RETURN(m->slot_row_, DeviceBuffer::Allocate(S * 4));
  MOE_ASSIGN_OR_RETURN(m->weights_, DeviceBuffer::Allocate(S * 4));
  MOE_ASSIGN_OR_RETURN(m->host_x_, PinnedBuffer::Allocate(T * H * 4));
  MOE_ASSIGN_OR_RETURN(m->host_y_, PinnedBuffer::Allocate(T * H * 4));
  MOE_ASSIGN_OR_RETURN(m->host_i32_, PinnedBuffer::Allocate((R + S) * 4));
  MOE_ASSIGN_OR_RETURN(m->host_f32_, PinnedBuffer::Allocate((R + S) * 4));
  m->offsets_.resize(c.num_experts + 1);
  m->order_.reserve(S);
  return m;
}

CudaLocalMoe::~CudaLocalMoe() {
  for (auto& e : marks_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaLocalMoe::Forward(const CudaLayerWeights& w, const float* x,
                                   int64_t n,
                                   absl::Span<const int64_t> segment_ends,
                                   float* y, Routing* routing,
                                   StageTimes* times) {
  const MoeLayerConfig& c = config_;
  const int64_t H = c.hidden, E = c.num_experts;
  if (n > max_tokens_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        n, " tokens exceed the ", max_tokens_, " this engine was sized for"));
  }
  if (w.expert_begin != 0 || w.expert_end != E) {
    return absl::FailedPreconditionError("single-GPU layer needs every expert");
  }
  StageTimes local;
  StageTimes& t = times != nullptr ? *times : local;
  StageClock clock;
  MOE_CUDA_OK(cudaSetDevice(device_));
  if (n > 0) {
    std::memcpy(host_x_.data(), x, n * H * 4);
    MOE_CUDA_OK(cudaMemcpyAsync(x_.data(), host_x_.data(), n * H * 4,
                                cudaMemcpyHostToDevice, stream_));
  }
  MOE_RETURN_IF_ERROR(router_->Route(*lt_, w, x_.as<float>(), n, segment_ends,
                                     stream_, routing));
  t.route_us = clock.Lap();

  // Plan on the host: dispatched slots sorted by expert.
  const int64_t S = routing->slots, num_slots = n * S;
  order_.resize(num_slots);
  slot_expert_.resize(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) {
    slot_expert_[i] = routing->dispatched[i] ? routing->expert[i] : -1;
  }
  const int64_t rows = kernels::cpu::SortSlotsByExpert(
      slot_expert_.data(), num_slots, E, offsets_.data(), order_.data());
  if (rows > max_rows_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(rows, " expert rows exceed ", max_rows_));
  }
  int32_t* src_row = host_i32_.as<int32_t>();
  int32_t* slot_row = src_row + max_rows_;
  float* scale = host_f32_.as<float>();
  float* weights = scale + max_rows_;
  std::fill(slot_row, slot_row + num_slots, -1);
  for (int64_t j = 0; j < rows; ++j) {
    src_row[j] = static_cast<int32_t>(order_[j] / S);
    scale[j] = routing->weight[order_[j]];
    slot_row[order_[j]] = static_cast<int32_t>(j);
  }
  std::memcpy(weights, routing->weight.data(), num_slots * 4);
  MOE_CUDA_OK(cudaMemcpyAsync(src_row_.data(), src_row, rows * 4,
                              cudaMemcpyHostToDevice, stream_));
  MOE_CUDA_OK(cudaMemcpyAsync(scale_.data(), scale, rows * 4,
                              cudaMemcpyHostToDevice, stream_));
  MOE_CUDA_OK(cudaMemcpyAsync(slot_row_.data(), slot_row, num_slots * 4,
                              cudaMemcpyHostToDevice, stream_));
  MOE_CUDA_OK(cudaMemcpyAsync(weights_.data(), weights, num_slots * 4,
                              cudaMemcpyHostToDevice, stream_));
  expert_ptrs_.clear();
  for (const auto& e : w.experts) expert_ptrs_.push_back(&e);
  t.plan_us = clock.Lap();

  MOE_CUDA_OK(cudaEventRecord(marks_[0], stream_));
  MOE_CUDA_OK(kcu::GatherRowsF32ToBf16(
      x_.as<float>(), H, src_row_.as<int32_t>(),
      c.score_before_experts ? scale_.as<float>() : nullptr, rows,
      perm_.as<uint16_t>(), stream_));
  MOE_RETURN_IF_ERROR(experts_->Run(*lt_, expert_ptrs_, offsets_,
                                    perm_.as<uint16_t>(), out_.data(),
                                    /*out_f32=*/false, stream_));
  MOE_CUDA_OK(cudaEventRecord(marks_[1], stream_));
  MOE_CUDA_OK(kcu::CombineSlots(
      n, S, H, c.score_before_experts ? nullptr : weights_.as<float>(),
      slot_row_.as<int32_t>(), out_.as<uint16_t>(), y_.as<float>(), stream_));
  MOE_CUDA_OK(cudaEventRecord(marks_[2], stream_));
  if (w.has_shared && n > 0) {
    MOE_CUDA_OK(kcu::ConvertF32ToBf16(x_.as<float>(), n * H, xb_.as<uint16_t>(),
                                      stream_));
    const CudaExpert* shared = &w.shared;
    const int64_t whole[2] = {0, n};
    MOE_RETURN_IF_ERROR(experts_->Run(*lt_, {&shared, 1}, whole,
                                      xb_.as<uint16_t>(), shared_out_.data(),
                                      /*out_f32=*/true, stream_));
    if (c.shared_gate) {
      MOE_RETURN_IF_ERROR(lt_->Run(n, 1, H, x_.data(), w.shared_gate.data(),
                                   gate_logit_.data(), CUDA_R_32F, CUDA_R_32F,
                                   stream_));
    }
    MOE_CUDA_OK(kcu::AddRows(y_.as<float>(), shared_out_.as<float>(),
                             c.shared_gate ? gate_logit_.as<float>() : nullptr,
                             n, H, stream_));
  }
  MOE_CUDA_OK(cudaEventRecord(marks_[3], stream_));
  if (n > 0) {
    MOE_CUDA_OK(cudaMemcpyAsync(host_y_.data(), y_.data(), n * H * 4,
                                cudaMemcpyDeviceToHost, stream_));
  }
  MOE_CUDA_OK(cudaStreamSynchronize(stream_));
  if (n > 0) std::memcpy(y, host_y_.data(), n * H * 4);
  float ms = 0;
  MOE_CUDA_OK(cudaEventElapsedTime(&ms, marks_[0], marks_[1]));
  t.experts_us = ms * 1000;
  MOE_CUDA_OK(cudaEventElapsedTime(&ms, marks_[1], marks_[2]));
  t.combine_us = ms * 1000;
  MOE_CUDA_OK(cudaEventElapsedTime(&ms, marks_[2], marks_[3]));
  t.shared_us = ms * 1000;
  t.total_us = t.route_us + t.plan_us + clock.Lap();
  return absl::OkStatus();
}

}  // namespace moe

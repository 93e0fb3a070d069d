#include "worker/cuda/cuda_step_executor.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_local_moe.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/lt_matmul.h"
#include "kernels/cuda/kernels.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/step_plan.h"

namespace moe {
namespace {

namespace kcu = kernels::cuda;

class CudaStepExecutor : public StepExecutor {
 public:
  explicit CudaStepExecutor(int device) : device_(device) {}
  ~CudaStepExecutor() override {
    for (auto& e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  }

  absl::Status Init() {
    MOE_CUDA_OK(cudaSetDevice(device_));
    MOE_CUDA_OK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    MOE_CUDA_OK(
        cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    for (auto& e : events_) MOE_CUDA_OK(cudaEventCreate(&e));
    MOE_ASSIGN_OR_RETURN(lt_, LtMatmul::Create());
    return absl::OkStatus();
  }

  std::string device() const override { return absl::StrCat("cuda:", device_); }

  absl::Status Load(const ModelSource& source, int64_t begin, int64_t end,
                    WeightDType /*dtype: always bf16 on the GPU*/,
                    int64_t max_batch_tokens) override {
    MOE_CUDA_OK(cudaSetDevice(device_));
    layers_.clear();
    config_ = source.info().layer;
    max_tokens_ = max_batch_tokens;
    const LoadOptions opts = WorkerLoadOptions(begin, end);
    for (int64_t layer : source.info().moe_layers) {
      MOE_ASSIGN_OR_RETURN(layers_[layer],
                           UploadLayerWeights(source, layer, opts));
    }
    const int64_t H = config_.hidden, T = max_tokens_;
    max_rows_ = MaxExpertRows(config_, T);
    max_slots_ = T * MaxSlots(config_);
    const int64_t R = max_rows_, S = max_slots_;
    MOE_ASSIGN_OR_RETURN(experts_, CudaExperts::Create(R, H, config_.inter));
    MOE_ASSIGN_OR_RETURN(x_, DeviceBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(y_, DeviceBuffer::Allocate(T * H * 4));
    for (DeviceBuffer* b :
         {&send_, &recv_, &grouped_, &grouped_out_, &out_, &back_}) {
      MOE_ASSIGN_OR_RETURN(*b, DeviceBuffer::Allocate(R * H * 2));
    }
    MOE_ASSIGN_OR_RETURN(src_row_, DeviceBuffer::Allocate(R * 4));
    MOE_ASSIGN_OR_RETURN(scale_, DeviceBuffer::Allocate(R * 4));
    MOE_ASSIGN_OR_RETURN(grouped_idx_, DeviceBuffer::Allocate(R * 4));
    MOE_ASSIGN_OR_RETURN(slot_row_, DeviceBuffer::Allocate(S * 4));
    MOE_ASSIGN_OR_RETURN(weights_, DeviceBuffer::Allocate(S * 4));
    MOE_ASSIGN_OR_RETURN(host_x_, PinnedBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(host_y_, PinnedBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(host_i32_, PinnedBuffer::Allocate((2 * R + S) * 4));
    MOE_ASSIGN_OR_RETURN(host_f32_, PinnedBuffer::Allocate((R + S) * 4));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      int rank, int world, const std::string& /*host*/,
      gloo::rendezvous::Store& store,
      std::chrono::milliseconds timeout) override {
    return CreateNcclCommunicator(rank, world, store, device_, timeout);
  }

  absl::Status Run(const moe::v1::Step& step, Communicator& comm,
                   moe::v1::StepResult* result) override {
    auto it = layers_.find(step.layer());
    if (it == layers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker has no weights for layer ", step.layer()));
    }
    const CudaLayerWeights& w = *it->second;
    const int64_t E = config_.num_experts, H = config_.hidden;
    MOE_RETURN_IF_ERROR(
        PlanStep(step, comm.rank(), comm.size(), E, H, max_tokens_, &plan_));
    const StepPlan& p = plan_;
    if (p.tokens > max_tokens_ || p.sent > max_rows_ ||
        p.received > max_rows_ || p.tokens * p.slots > max_slots_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "step ", step.step_id(), " exceeds the workspaces sized for ",
          max_tokens_, " tokens"));
    }
    const auto timeout = StepTimeout(step);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MOE_CUDA_OK(cudaSetDevice(device_));

    // Host-side plan into pinned staging, then one upload of each array.
    int32_t* src_row = host_i32_.as<int32_t>();
    int32_t* grouped = src_row + max_rows_;
    int32_t* slot_row = grouped + max_rows_;
    float* scale = host_f32_.as<float>();
    float* weights = scale + max_rows_;
    const int64_t num_slots = p.tokens * p.slots;
    for (int64_t j = 0; j < p.sent; ++j) {
      src_row[j] = static_cast<int32_t>(p.order[j] / p.slots);
      scale[j] = step.weights(p.order[j]);
    }
    for (int64_t i = 0; i < p.received; ++i)
      grouped[i] = static_cast<int32_t>(p.grouped[i]);
    for (int64_t i = 0; i < num_slots; ++i)
      slot_row[i] = static_cast<int32_t>(p.slot_row[i]);
    std::memcpy(weights, step.weights().data(), num_slots * 4);
    std::memcpy(host_x_.data(), step.rows().data().data(), p.tokens * H * 4);

    cudaEvent_t start = events_[0], sent = events_[1], received = events_[2],
                computed = events_[3], returned = events_[4], done = events_[5];
    MOE_CUDA_OK(cudaEventRecord(start, compute_));
    auto up = [&](DeviceBuffer& d, const void* h, int64_t bytes) {
      return bytes > 0 ? cudaMemcpyAsync(d.data(), h, bytes,
                                         cudaMemcpyHostToDevice, compute_)
                       : cudaSuccess;
    };
    MOE_CUDA_OK(up(x_, host_x_.data(), p.tokens * H * 4));
    MOE_CUDA_OK(up(src_row_, src_row, p.sent * 4));
    MOE_CUDA_OK(up(scale_, scale, p.sent * 4));
    MOE_CUDA_OK(up(grouped_idx_, grouped, p.received * 4));
    MOE_CUDA_OK(up(slot_row_, slot_row, num_slots * 4));
    MOE_CUDA_OK(up(weights_, weights, num_slots * 4));
    const bool scale_input = config_.score_before_experts;
    MOE_CUDA_OK(
        kcu::GatherRowsF32ToBf16(x_.as<float>(), H, src_row_.as<int32_t>(),
                                 scale_input ? scale_.as<float>() : nullptr,
                                 p.sent, send_.as<uint16_t>(), compute_));
    MOE_CUDA_OK(cudaEventRecord(sent, compute_));

    // Dispatch on the communication stream.
    counts_send_.resize(p.send_rows.size());
    counts_recv_.resize(p.recv_rows.size());
    for (size_t q = 0; q < p.send_rows.size(); ++q) {
      counts_send_[q] = p.send_rows[q] * H;
      counts_recv_[q] = p.recv_rows[q] * H;
    }
    MOE_CUDA_OK(cudaStreamWaitEvent(comm_stream_, sent, 0));
    MOE_RETURN_IF_ERROR(comm.AllToAllV(send_.data(), counts_send_, recv_.data(),
                                       counts_recv_, ElementType::kBF16,
                                       timeout, comm_stream_));
    MOE_CUDA_OK(cudaEventRecord(received, comm_stream_));

    // Experts: regroup (source, expert) -> (expert, source), run, put back.
    MOE_CUDA_OK(cudaStreamWaitEvent(compute_, received, 0));
    MOE_CUDA_OK(kcu::GatherRowsBf16(recv_.as<uint16_t>(), H,
                                    grouped_idx_.as<int32_t>(), p.received,
                                    grouped_.as<uint16_t>(), compute_));
    expert_ptrs_.clear();
    for (const auto& e : w.experts) expert_ptrs_.push_back(&e);
    MOE_RETURN_IF_ERROR(experts_->Run(*lt_, expert_ptrs_, p.expert_offsets,
                                      grouped_.as<uint16_t>(),
                                      grouped_out_.data(),
                                      /*out_f32=*/false, compute_));
    MOE_CUDA_OK(kcu::ScatterRowsBf16(grouped_out_.as<uint16_t>(), H,
                                     grouped_idx_.as<int32_t>(), p.received,
                                     out_.as<uint16_t>(), compute_));
    MOE_CUDA_OK(cudaEventRecord(computed, compute_));

    // Combine: back to the sources, then the weighted sum in slot order.
    MOE_CUDA_OK(cudaStreamWaitEvent(comm_stream_, computed, 0));
    MOE_RETURN_IF_ERROR(comm.AllToAllV(out_.data(), counts_recv_, back_.data(),
                                       counts_send_, ElementType::kBF16,
                                       timeout, comm_stream_));
    MOE_CUDA_OK(cudaEventRecord(returned, comm_stream_));
    MOE_CUDA_OK(cudaStreamWaitEvent(compute_, returned, 0));
    MOE_CUDA_OK(kcu::CombineSlots(p.tokens, p.slots, H,
                                  scale_input ? nullptr : weights_.as<float>(),
                                  slot_row_.as<int32_t>(), back_.as<uint16_t>(),
                                  y_.as<float>(), compute_));
    if (p.tokens > 0) {
      MOE_CUDA_OK(cudaMemcpyAsync(host_y_.data(), y_.data(), p.tokens * H * 4,
                                  cudaMemcpyDeviceToHost, compute_));
    }
    MOE_CUDA_OK(cudaEventRecord(done, compute_));
    MOE_RETURN_IF_ERROR(comm.Await(done, deadline));

    auto* out = result->mutable_rows();
    out->set_dtype(moe::v1::F32);
    out->add_shape(p.tokens);
    out->add_shape(H);
    out->set_data(static_cast<const char*>(host_y_.data()), p.tokens * H * 4);
    float ms = 0;
    MOE_CUDA_OK(cudaEventElapsedTime(&ms, start, received));
    result->set_dispatch_us(ms * 1000);
    MOE_CUDA_OK(cudaEventElapsedTime(&ms, received, computed));
    result->set_experts_us(ms * 1000);
    MOE_CUDA_OK(cudaEventElapsedTime(&ms, computed, done));
    result->set_combine_us(ms * 1000);
    result->set_expert_rows(p.received);
    return absl::OkStatus();
  }

 private:
  int device_;
  cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;
  cudaEvent_t events_[6] = {};
  std::unique_ptr<LtMatmul> lt_;
  MoeLayerConfig config_;
  int64_t max_tokens_ = 0, max_rows_ = 0, max_slots_ = 0;
  std::map<int64_t, std::unique_ptr<CudaLayerWeights>> layers_;
  std::unique_ptr<CudaExperts> experts_;
  DeviceBuffer x_, y_, send_, recv_, grouped_, grouped_out_, out_, back_;
  DeviceBuffer src_row_, scale_, grouped_idx_, slot_row_, weights_;
  PinnedBuffer host_x_, host_y_, host_i32_, host_f32_;
  StepPlan plan_;
  std::vector<int64_t> counts_send_, counts_recv_;
  std::vector<const CudaExpert*> expert_ptrs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateCudaStepExecutor(
    int device) {
  if (absl::Status s = CudaDeviceAvailable(device); !s.ok()) return s;
  auto e = std::make_unique<CudaStepExecutor>(device);
  if (absl::Status s = e->Init(); !s.ok()) return s;
  return std::unique_ptr<StepExecutor>(std::move(e));
}

}  // namespace moe

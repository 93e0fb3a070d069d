#include "server/cuda/cuda_step_runner.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_local_moe.h"
#include "engine/cuda/cuda_router.h"
#include "engine/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"
#include "server/remote_step.h"

namespace moe {
namespace {

namespace kcu = kernels::cuda;

class CudaStepRunner : public StepRunner {
 public:
  CudaStepRunner(const RouterModel& model, WorkerPool* pool)
      : model_(model), pool_(pool) {}

  absl::Status Init(int64_t max_tokens) {
    const MoeLayerConfig& c = model_.info().layer;
    const int device = model_.cuda_device();
    max_tokens_ = max_tokens;
    if (pool_ == nullptr) {
      MOE_ASSIGN_OR_RETURN(local_, CudaLocalMoe::Create(device, c, max_tokens));
      return absl::OkStatus();
    }
    MOE_CUDA_OK(cudaSetDevice(device));
    MOE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const int64_t H = c.hidden, T = max_tokens;
    MOE_ASSIGN_OR_RETURN(lt_, LtMatmul::Create());
    MOE_ASSIGN_OR_RETURN(router_, CudaRouter::Create(c, T));
    if (c.has_shared()) {
      MOE_ASSIGN_OR_RETURN(shared_, CudaExperts::Create(T, H, c.shared_inter));
    }
    MOE_ASSIGN_OR_RETURN(x_, DeviceBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(xb_, DeviceBuffer::Allocate(T * H * 2));
    MOE_ASSIGN_OR_RETURN(shared_out_, DeviceBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(raw_shared_, DeviceBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(gate_logit_, DeviceBuffer::Allocate(T * 4));
    MOE_ASSIGN_OR_RETURN(host_x_, PinnedBuffer::Allocate(T * H * 4));
    MOE_ASSIGN_OR_RETURN(host_shared_, PinnedBuffer::Allocate(T * H * 4));
    return absl::OkStatus();
  }

  ~CudaStepRunner() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Run(int64_t layer, const float* x, int64_t n,
                   absl::Span<const int64_t> segment_ends,
                   std::chrono::steady_clock::time_point deadline,
                   Output* out) override {
    const CudaLayerWeights* w = model_.cuda_layer(layer);
    if (w == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("layer ", layer, " is not an MoE layer"));
    }
    const MoeLayerConfig& c = w->config;
    const int64_t H = c.hidden;
    out->y.resize(n * H);
    out->times = StageTimes();
    if (local_ != nullptr) {
      return local_->Forward(*w, x, n, segment_ends, out->y.data(),
                             &out->routing, &out->times);
    }
    if (n > max_tokens_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(n, " tokens exceed ", max_tokens_));
    }
    StageClock clock;
    MOE_CUDA_OK(cudaSetDevice(model_.cuda_device()));
    if (n > 0) {
      std::memcpy(host_x_.data(), x, n * H * 4);
      MOE_CUDA_OK(cudaMemcpyAsync(x_.data(), host_x_.data(), n * H * 4,
                                  cudaMemcpyHostToDevice, stream_));
    }
    MOE_RETURN_IF_ERROR(router_->Route(*lt_, *w, x_.as<float>(), n,
                                       segment_ends, stream_, &out->routing));
    out->times.route_us = clock.Lap();
    // The shared expert on the GPU while the workers compute.
    auto shared = [&]() -> absl::StatusOr<const float*> {
      if (!w->has_shared || n == 0) return nullptr;
      MOE_RETURN_IF_ERROR(Shared(*w, n));
      return host_shared_.as<float>();
    };
    return remote_.Run(*pool_, layer, x, n, H, c.num_experts, out->routing,
                       deadline, shared, clock, out->y.data(), &out->times);
  }

 private:
  // host_shared_ [n, H] = S(x) (times the sigmoid gate), through the GPU.
  absl::Status Shared(const CudaLayerWeights& w, int64_t n) {
    const int64_t H = w.config.hidden;
    MOE_CUDA_OK(cudaSetDevice(model_.cuda_device()));
    MOE_CUDA_OK(kcu::ConvertF32ToBf16(x_.as<float>(), n * H, xb_.as<uint16_t>(),
                                      stream_));
    const CudaExpert* e = &w.shared;
    const int64_t whole[2] = {0, n};
    MOE_RETURN_IF_ERROR(shared_->Run(*lt_, {&e, 1}, whole, xb_.as<uint16_t>(),
                                     raw_shared_.data(), /*out_f32=*/true,
                                     stream_));
    MOE_CUDA_OK(cudaMemsetAsync(shared_out_.data(), 0, n * H * 4, stream_));
    if (w.config.shared_gate) {
      MOE_RETURN_IF_ERROR(lt_->Run(n, 1, H, x_.data(), w.shared_gate.data(),
                                   gate_logit_.data(), CUDA_R_32F, CUDA_R_32F,
                                   stream_));
    }
    // shared_out_ = 0 + gate * S(x): the gated shared expert, ready to add.
    MOE_CUDA_OK(
        kcu::AddRows(shared_out_.as<float>(), raw_shared_.as<float>(),
                     w.config.shared_gate ? gate_logit_.as<float>() : nullptr,
                     n, H, stream_));
    MOE_CUDA_OK(cudaMemcpyAsync(host_shared_.data(), shared_out_.data(),
                                n * H * 4, cudaMemcpyDeviceToHost, stream_));
    MOE_CUDA_OK(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  const RouterModel& model_;
  WorkerPool* pool_;
  int64_t max_tokens_ = 0;
  std::unique_ptr<CudaLocalMoe> local_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtMatmul> lt_;
  std::unique_ptr<CudaRouter> router_;
  std::unique_ptr<CudaExperts> shared_;
  DeviceBuffer x_, xb_, shared_out_, raw_shared_, gate_logit_;
  PinnedBuffer host_x_, host_shared_;
  RemoteStep remote_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepRunner>> CreateCudaStepRunner(
    const RouterModel& model, WorkerPool* pool, int64_t max_batch_tokens) {
  auto r = std::make_unique<CudaStepRunner>(model, pool);
  MOE_RETURN_IF_ERROR(r->Init(max_batch_tokens));
  return std::unique_ptr<StepRunner>(std::move(r));
}

}  // namespace moe

#include "engine/cuda/cuda_experts.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "kernels/cuda/kernels.h"

namespace moe {

absl::StatusOr<std::unique_ptr<CudaExperts>> CudaExperts::Create(
    int64_t max_rows, int64_t hidden, int64_t max_inter) {
  auto x = std::unique_ptr<CudaExperts>(new CudaExperts());
  x->max_rows_ = max_rows;
  x->hidden_ = hidden;
  x->max_inter_ = max_inter;
  MOE_ASSIGN_OR_RETURN(x->gate_up_,
                       DeviceBuffer::Allocate(max_rows * 2 * max_inter * 4));
  MOE_ASSIGN_OR_RETURN(x->h_, DeviceBuffer::Allocate(max_rows * max_inter * 2));
  return x;
}

absl::Status CudaExperts::Run(LtMatmul& lt,
                              absl::Span<const CudaExpert* const> experts,
                              absl::Span<const int64_t> offsets,
                              const uint16_t* in, void* out, bool out_f32,
                              cudaStream_t stream) {
  if (offsets.size() != experts.size() + 1) {
    return absl::InvalidArgumentError(
        "expert offsets need one more entry than experts");
  }
  const int64_t rows = offsets.back();
  if (rows == 0) return absl::OkStatus();
  const int64_t H = hidden_, I = experts.front()->inter;
  if (rows > max_rows_ || I > max_inter_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        rows, " rows of intermediate size ", I, " exceed the workspace (",
        max_rows_, " rows, size ", max_inter_, ")"));
  }
  auto* gate_up = gate_up_.as<float>();
  auto* h = h_.as<uint16_t>();
  const size_t out_size = out_f32 ? 4 : 2;
  for (size_t g = 0; g < experts.size(); ++g) {
    const int64_t off = offsets[g], m = offsets[g + 1] - off;
    MOE_RETURN_IF_ERROR(lt.Run(m, 2 * I, H, in + off * H,
                               experts[g]->w13.data(), gate_up + off * 2 * I,
                               CUDA_R_16BF, CUDA_R_32F, stream));
  }
  MOE_CUDA_OK(kernels::cuda::SiluMul(gate_up, rows, I, h, stream));
  for (size_t g = 0; g < experts.size(); ++g) {
    const int64_t off = offsets[g], m = offsets[g + 1] - off;
    MOE_RETURN_IF_ERROR(lt.Run(m, H, I, h + off * I, experts[g]->w2.data(),
                               static_cast<char*>(out) + off * H * out_size,
                               CUDA_R_16BF, out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                               stream));
  }
  return absl::OkStatus();
}

}  // namespace moe

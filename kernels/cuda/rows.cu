// Row movement and elementwise kernels of the MoE layer.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace moe::kernels::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ float Bf16ToF32(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t F32ToBf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One block per row; threads stride over the columns.
__global__ void GatherF32ToBf16Kernel(const float* src, int64_t cols,
                                      const int32_t* src_row,
                                      const float* scale, uint16_t* dst) {
  const int64_t j = blockIdx.x;
  const float* s = src + static_cast<int64_t>(src_row[j]) * cols;
  const float a = scale != nullptr ? scale[j] : 1.0f;
  uint16_t* d = dst + j * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    d[c] = F32ToBf16(s[c] * a);
}

// Eight fp32 values as eight bf16 in 16 bytes (element 0 in the low half).
__device__ __forceinline__ uint32_t PackBf16(float a, float b) {
  return static_cast<uint32_t>(F32ToBf16(a)) |
         (static_cast<uint32_t>(F32ToBf16(b)) << 16);
}

// The same with 16-byte accesses: vcols = cols / 8 units of 8 values.
__global__ void GatherF32ToBf16Vec8Kernel(const float4* src, int64_t vcols,
                                          const int32_t* src_row,
                                          const float* scale, uint4* dst) {
  const int64_t j = blockIdx.x;
  const float4* s = src + static_cast<int64_t>(src_row[j]) * vcols * 2;
  const float a = scale != nullptr ? scale[j] : 1.0f;
  uint4* d = dst + j * vcols;
  for (int64_t c = threadIdx.x; c < vcols; c += blockDim.x) {
    const float4 lo = s[2 * c], hi = s[2 * c + 1];
    d[c] =
        make_uint4(PackBf16(lo.x * a, lo.y * a), PackBf16(lo.z * a, lo.w * a),
                   PackBf16(hi.x * a, hi.y * a), PackBf16(hi.z * a, hi.w * a));
  }
}

// T: uint16_t (one value) or uint4 (eight); cols counts T units.
template <typename T>
__global__ void GatherBf16Kernel(const T* src, int64_t cols,
                                 const int32_t* src_row, T* dst) {
  const int64_t j = blockIdx.x;
  const int32_t r = src_row[j];
  T* d = dst + j * cols;
  if (r < 0) {  // padding
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = T{};
    return;
  }
  const T* s = src + static_cast<int64_t>(r) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

template <typename T>
__global__ void ScatterBf16Kernel(const T* src, int64_t cols,
                                  const int32_t* dst_row, T* dst) {
  const int64_t j = blockIdx.x;
  const int32_t r = dst_row[j];
  if (r < 0) return;  // padding
  const T* s = src + j * cols;
  T* d = dst + static_cast<int64_t>(r) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

__global__ void SiluMulKernel(const float* gate_up, int64_t rows, int64_t inter,
                              uint16_t* h) {
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = gate_up[r * 2 * inter + c];
    const float u = gate_up[r * 2 * inter + inter + c];
    h[i] = F32ToBf16(g / (1.0f + expf(-g)) * u);
  }
}

// Row r's g at gate_up[r * ld + c], its u at gate_up[r * ld + up + c]: a
// gated expert's [rows, 2 * inter] (ld 2 * inter, up inter), or a non-gated
// one's u alone [rows, inter] (ld inter, up 0: g reads u, which relu2
// ignores).
__global__ void SiluMulBf16Kernel(const uint16_t* gate_up, int64_t ld,
                                  int64_t up, int64_t rows, int64_t inter,
                                  uint16_t* h, GatedActParams act) {
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = Bf16ToF32(gate_up[r * ld + c]);
    const float u = Bf16ToF32(gate_up[r * ld + up + c]);
    h[i] = F32ToBf16(GatedAct(act, g, u));  // kernels/act_rule.h
  }
}

// T: uint16_t (bf16 bits) or float.
template <typename T>
__global__ void AddBiasKernel(T* rows, int64_t n, int64_t cols, int64_t ld,
                              const float* bias) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    T& v = rows[r * ld + c];
    if constexpr (sizeof(T) == 2) {
      v = F32ToBf16(Bf16ToF32(v) + bias[c]);
    } else {
      v += bias[c];
    }
  }
}

__global__ void CombineKernel(int64_t slots, int64_t cols, const float* w,
                              const int32_t* slot_row, const uint16_t* out,
                              float* y) {
  const int64_t t = blockIdx.x;
  const int32_t* rows = slot_row + t * slots;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s < slots; ++s) {  // slot order: deterministic
      const int32_t r = rows[s];
      if (r < 0) continue;
      const float a = w != nullptr ? w[t * slots + s] : 1.0f;
      acc += a * Bf16ToF32(out[static_cast<int64_t>(r) * cols + c]);
    }
    y[t * cols + c] = acc;
  }
}

// CombineKernel over 8 columns per thread (16-byte loads of the outputs,
// two float4 stores): the same sums in the same slot order.
__global__ void CombineVec8Kernel(int64_t slots, int64_t vcols, const float* w,
                                  const int32_t* slot_row, const uint4* out,
                                  float4* y) {
  const int64_t t = blockIdx.x;
  const int32_t* rows = slot_row + t * slots;
  for (int64_t c = threadIdx.x; c < vcols; c += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t s = 0; s < slots; ++s) {
      const int32_t r = rows[s];
      if (r < 0) continue;
      const float a = w != nullptr ? w[t * slots + s] : 1.0f;
      const uint4 v = out[static_cast<int64_t>(r) * vcols + c];
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
      for (int i = 0; i < 4; ++i) {
        acc[2 * i] += a * Bf16ToF32(static_cast<uint16_t>(u[i] & 0xffffu));
        acc[2 * i + 1] += a * Bf16ToF32(static_cast<uint16_t>(u[i] >> 16));
      }
    }
    float4* d = y + (t * vcols + c) * 2;
    d[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    d[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
}

__global__ void AddRowsKernel(float* y, const float* add,
                              const float* gate_logit, int64_t cols) {
  const int64_t t = blockIdx.x;
  const float g =
      gate_logit != nullptr ? 1.0f / (1.0f + expf(-gate_logit[t])) : 1.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[t * cols + c] += g * add[t * cols + c];
  }
}

__global__ void ConvertKernel(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = F32ToBf16(src[i]);
  }
}

int RowThreads(int64_t cols) {
  return cols >= kBlock ? kBlock : (cols + 31) / 32 * 32;
}

// Rows of `cols` values that can move 8 at a time: whole 16-byte units,
// with every row start 16-byte aligned.
bool Vec8(int64_t cols, const void* a, const void* b) {
  return cols % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

unsigned StrideBlocks(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}

}  // namespace

cudaError_t GatherRowsF32ToBf16(const float* src, int64_t cols,
                                const int32_t* src_row, const float* scale,
                                int64_t rows, uint16_t* dst,
                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (Vec8(cols, src, dst)) {
    return Launch(GatherF32ToBf16Vec8Kernel, dim3(static_cast<unsigned>(rows)),
                  dim3(RowThreads(cols / 8)), 0, stream,
                  reinterpret_cast<const float4*>(src), cols / 8, src_row,
                  scale, reinterpret_cast<uint4*>(dst));
  }
  return Launch(GatherF32ToBf16Kernel, dim3(static_cast<unsigned>(rows)),
                dim3(RowThreads(cols)), 0, stream, src, cols, src_row, scale,
                dst);
}

cudaError_t GatherRowsBf16(const uint16_t* src, int64_t cols,
                           const int32_t* src_row, int64_t rows, uint16_t* dst,
                           cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (Vec8(cols, src, dst)) {
    return Launch(GatherBf16Kernel<uint4>, dim3(static_cast<unsigned>(rows)),
                  dim3(RowThreads(cols / 8)), 0, stream,
                  reinterpret_cast<const uint4*>(src), cols / 8, src_row,
                  reinterpret_cast<uint4*>(dst));
  }
  return Launch(GatherBf16Kernel<uint16_t>, dim3(static_cast<unsigned>(rows)),
                dim3(RowThreads(cols)), 0, stream, src, cols, src_row, dst);
}

cudaError_t ScatterRowsBf16(const uint16_t* src, int64_t cols,
                            const int32_t* dst_row, int64_t rows, uint16_t* dst,
                            cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (Vec8(cols, src, dst)) {
    return Launch(ScatterBf16Kernel<uint4>, dim3(static_cast<unsigned>(rows)),
                  dim3(RowThreads(cols / 8)), 0, stream,
                  reinterpret_cast<const uint4*>(src), cols / 8, dst_row,
                  reinterpret_cast<uint4*>(dst));
  }
  return Launch(ScatterBf16Kernel<uint16_t>, dim3(static_cast<unsigned>(rows)),
                dim3(RowThreads(cols)), 0, stream, src, cols, dst_row, dst);
}

cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t inter,
                    uint16_t* h, cudaStream_t stream) {
  if (rows == 0 || inter == 0) return cudaSuccess;
  return Launch(SiluMulKernel, dim3(StrideBlocks(rows * inter)), dim3(kBlock),
                0, stream, gate_up, rows, inter, h);
}

cudaError_t SiluMulBf16(const uint16_t* gate_up, int64_t rows, int64_t inter,
                        uint16_t* h, cudaStream_t stream,
                        const GatedActParams& act) {
  return ActRowsBf16(gate_up, 2 * inter, inter, rows, inter, h, stream, act);
}

cudaError_t ActRowsBf16(const uint16_t* gate_up, int64_t ld, int64_t up,
                        int64_t rows, int64_t inter, uint16_t* h,
                        cudaStream_t stream, const GatedActParams& act) {
  if (rows == 0 || inter == 0) return cudaSuccess;
  if (ld < up + inter || up < 0) return cudaErrorInvalidValue;
  return Launch(SiluMulBf16Kernel, dim3(StrideBlocks(rows * inter)),
                dim3(kBlock), 0, stream, gate_up, ld, up, rows, inter, h, act);
}

cudaError_t AddBiasRowsBf16(uint16_t* rows, int64_t n, int64_t cols, int64_t ld,
                            const float* bias, cudaStream_t stream) {
  if (n == 0 || cols == 0) return cudaSuccess;
  if (ld < cols || bias == nullptr) return cudaErrorInvalidValue;
  return Launch(AddBiasKernel<uint16_t>, dim3(StrideBlocks(n * cols)),
                dim3(kBlock), 0, stream, rows, n, cols, ld, bias);
}

cudaError_t AddBiasRowsF32(float* rows, int64_t n, int64_t cols, int64_t ld,
                           const float* bias, cudaStream_t stream) {
  if (n == 0 || cols == 0) return cudaSuccess;
  if (ld < cols || bias == nullptr) return cudaErrorInvalidValue;
  return Launch(AddBiasKernel<float>, dim3(StrideBlocks(n * cols)),
                dim3(kBlock), 0, stream, rows, n, cols, ld, bias);
}

cudaError_t CombineSlots(int64_t tokens, int64_t slots, int64_t cols,
                         const float* w, const int32_t* slot_row,
                         const uint16_t* expert_out, float* y,
                         cudaStream_t stream) {
  if (tokens == 0 || cols == 0) return cudaSuccess;
  if (Vec8(cols, expert_out, y)) {
    return Launch(CombineVec8Kernel, dim3(static_cast<unsigned>(tokens)),
                  dim3(RowThreads(cols / 8)), 0, stream, slots, cols / 8, w,
                  slot_row, reinterpret_cast<const uint4*>(expert_out),
                  reinterpret_cast<float4*>(y));
  }
  return Launch(CombineKernel, dim3(static_cast<unsigned>(tokens)),
                dim3(RowThreads(cols)), 0, stream, slots, cols, w, slot_row,
                expert_out, y);
}

cudaError_t AddRows(float* y, const float* add, const float* gate_logit,
                    int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return Launch(AddRowsKernel, dim3(static_cast<unsigned>(rows)),
                dim3(RowThreads(cols)), 0, stream, y, add, gate_logit, cols);
}

cudaError_t ConvertF32ToBf16(const float* src, int64_t count, uint16_t* dst,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return Launch(ConvertKernel, dim3(StrideBlocks(count)), dim3(kBlock), 0,
                stream, src, count, dst);
}

}  // namespace moe::kernels::cuda

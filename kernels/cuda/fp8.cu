// FP8 kernels of the expert pass: activations quantised per row per 128
// columns as they are gathered (and the SwiGLU output as it is computed),
// in the scale layout cuBLASLt's block-scaled matmul reads; block-scaled
// weights dequantised to bf16 where that matmul does not exist. The rules
// are kernels/fp8_rule.h, shared with the host references.
#include <cuda_bf16.h>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp8_rule.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kThreads = 128;  // one thread per column of a 128-block
constexpr int kWarps = kThreads / 32;
static_assert(kThreads == kFp8Block, "one thread per column of a block");

__device__ __forceinline__ float Bf16Value(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// The segment of row j: the first g with j < end[g].
__device__ __forceinline__ int32_t SegmentOf(const Fp8Segments& s, int64_t j) {
  int32_t lo = 0, hi = s.count - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (j < s.end[mid]) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The largest |v| over the block's threads (every thread gets it).
__device__ __forceinline__ float BlockAmax(float v, float* shared) {
  float a = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = a;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared[w]);
  __syncthreads();  // `shared` is reused by the next block of columns
  return m;
}

// One block per row: each 128-column block's amax, scale and codes. Value
// gives column c of row j (c < cols).
template <typename Value>
__device__ void QuantizeRow(int64_t j, int64_t cols, const Fp8Segments& seg,
                            int64_t dst_ld, uint8_t* dst, float* scale,
                            Value value) {
  __shared__ float amax[kWarps];
  const int32_t g = SegmentOf(seg, j);
  const int64_t begin = g > 0 ? seg.end[g - 1] : 0;
  const int64_t m = seg.end[g] - begin;
  const int64_t base = Fp8SegmentScaleBase(begin, g, cols);
  uint8_t* out = dst + j * dst_ld;
  const int64_t blocks = Fp8Blocks(cols);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const int64_t c = kb * kFp8Block + threadIdx.x;
    const float v = c < cols ? value(c) : 0.0f;
    const float s = Fp8BlockScale(BlockAmax(v, amax));
    if (c < cols) out[c] = E4M3FromF32(v / s);
    if (threadIdx.x == 0) scale[Fp8ActScaleIndex(base, m, j - begin, kb)] = s;
  }
  // Padding columns (K rounded up for 16-byte rows) multiply as zeros.
  for (int64_t c = cols + threadIdx.x; c < dst_ld; c += blockDim.x) out[c] = 0;
}

__global__ void QuantizeRowsKernel(const uint16_t* src, int64_t cols,
                                   const int32_t* src_row, Fp8Segments seg,
                                   int64_t dst_ld, uint8_t* dst, float* scale) {
  const int64_t j = blockIdx.x;
  const uint16_t* row =
      src + (src_row != nullptr ? static_cast<int64_t>(src_row[j]) : j) * cols;
  QuantizeRow(j, cols, seg, dst_ld, dst, scale,
              [row](int64_t c) { return Bf16Value(row[c]); });
}

__global__ void SiluMulQuantKernel(const uint16_t* gate_up, int64_t gu_ld,
                                   int64_t up, int64_t inter, Fp8Segments seg,
                                   int64_t h_ld, uint8_t* h, float* scale,
                                   GatedActParams act) {
  const int64_t j = blockIdx.x;
  const uint16_t* row = gate_up + j * gu_ld;
  QuantizeRow(j, inter, seg, h_ld, h, scale, [row, up, act](int64_t c) {
    const float g = Bf16Value(row[c]);
    const float u = Bf16Value(row[up + c]);
    return GatedAct(act, g, u);  // kernels/act_rule.h
  });
}

__global__ void DequantizeKernel(const uint8_t* codes, int64_t rows,
                                 int64_t cols, int64_t code_ld,
                                 const float* scale, int64_t scale_ld,
                                 uint16_t* dst, int64_t dst_ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float s = scale[(r / kFp8Block) * scale_ld + c / kFp8Block];
    dst[r * dst_ld + c] = __bfloat16_as_ushort(
        __float2bfloat16_rn(E4M3ToF32(codes[r * code_ld + c]) * s));
  }
}

__global__ void WidenKernel(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = Bf16Value(src[i]);
  }
}

unsigned GridFor(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}

bool SegmentsValid(const Fp8Segments& s, int64_t rows) {
  if (s.count < 1 || s.count > kMaxFp8Segments) return false;
  for (int32_t g = 0; g < s.count; ++g) {
    if (s.end[g] < (g > 0 ? s.end[g - 1] : 0)) return false;
  }
  return s.end[s.count - 1] == rows;
}

}  // namespace

cudaError_t QuantizeRowsFp8(const uint16_t* src, int64_t cols,
                            const int32_t* src_row, int64_t rows,
                            const Fp8Segments& segments, int64_t dst_ld,
                            uint8_t* dst, float* scale, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (dst_ld < cols || !SegmentsValid(segments, rows)) {
    return cudaErrorInvalidValue;
  }
  return Launch(QuantizeRowsKernel, dim3(static_cast<unsigned>(rows)),
                dim3(kThreads), 0, stream, src, cols, src_row, segments, dst_ld,
                dst, scale);
}

cudaError_t SiluMulQuantFp8(const uint16_t* gate_up, int64_t gu_ld, int64_t up,
                            int64_t inter, int64_t rows,
                            const Fp8Segments& segments, int64_t h_ld,
                            uint8_t* h, float* scale, cudaStream_t stream,
                            const GatedActParams& act) {
  if (rows == 0 || inter == 0) return cudaSuccess;
  if (h_ld < inter || !SegmentsValid(segments, rows)) {
    return cudaErrorInvalidValue;
  }
  return Launch(SiluMulQuantKernel, dim3(static_cast<unsigned>(rows)),
                dim3(kThreads), 0, stream, gate_up, gu_ld, up, inter, segments,
                h_ld, h, scale, act);
}

cudaError_t DequantizeFp8ToBf16(const uint8_t* codes, int64_t rows,
                                int64_t cols, int64_t code_ld,
                                const float* scale, int64_t scale_ld,
                                uint16_t* dst, int64_t dst_ld,
                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return Launch(DequantizeKernel, dim3(GridFor(rows * cols)), dim3(256), 0,
                stream, codes, rows, cols, code_ld, scale, scale_ld, dst,
                dst_ld);
}

cudaError_t ConvertBf16ToF32(const uint16_t* src, int64_t count, float* dst,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return Launch(WidenKernel, dim3(GridFor(count)), dim3(256), 0, stream, src,
                count, dst);
}

}  // namespace moe::kernels::cuda

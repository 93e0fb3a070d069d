// The FP8 rules that the GPU kernels (kernels/cuda/fp8.cu) and their host
// references must apply alike, written once: E4M3FN encoding (round to
// nearest even, saturating at +-448, NaN -> 0x7f: bit for bit what
// core/dtype.h's F32ToF8E4M3 gives, which the CPU weight quantiser uses),
// the block scale of a block of values (amax / 448, 1 for an all-zero
// block), and where cuBLASLt's block-scaled FP8 matmul (sm_90,
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F) reads each
// scale. Plain C++ that nvcc compiles for the device too; no CUDA types.
//
// Scale layouts (cuBLASLt, row-major [rows, cols] operands read as the
// column-major [cols, rows] matrices of engine/cuda/lt_matmul.h):
//  - weights, W [n, k], one scale per 128 x 128 block: block (rb, kb) at
//    rb * Fp8WeightScaleLd(k) + kb, the k-blocks of a row of blocks
//    contiguous and their stride rounded up to 4 floats (16 bytes): the
//    cuBLAS documentation's "scaling factors layouts" as PyTorch quotes it
//    (pytorch/pytorch#166752: without the rounding, silent wrong answers
//    where ceil(k / 128) % 4 != 0), and what NVIDIA's LtBlk128x128Fp8Matmul
//    sample allocates;
//  - activations, X [m, k], one scale per row per 128 columns: (row r,
//    block kb) at kb * Fp8MatmulRows(m) + r ("outer-dim-major": the scales
//    of a block contiguous), m being the row count of that one matmul. Each
//    expert's rows are their own matmul, so a pass over several experts
//    keeps one such table per expert (a segment), each starting on a
//    16-byte boundary: Fp8SegmentScaleBase.
//  - row counts: cuBLASLt 13.1 on sm_90 (an H200, 2026-11-26) finds no
//    algorithm for a VEC128 operand whose row count is not a multiple of 4
//    (CUBLAS_STATUS_NOT_SUPPORTED from the heuristic at m = 1, 2, 3, 5, 17,
//    130; every multiple of 4 tried ran and matched), so each matmul runs
//    Fp8MatmulRows(m) rows: the rows past m read whatever follows (the next
//    expert's rows, or the buffers' spare rows) and their outputs are
//    overwritten or dropped (engine/cuda/cuda_experts.cc). The table of a
//    segment is laid out for those rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace moe::kernels {

inline constexpr int64_t kFp8Block = 128;  // block edge, both modes
inline constexpr float kE4M3Max = 448.0f;  // largest finite E4M3FN value
inline constexpr int kFp8ScaleAlign = 4;   // floats: 16 bytes
inline constexpr int kFp8RowQuantum = 4;   // rows of a block-scaled matmul

MOE_HOST_DEVICE inline uint32_t Fp8FloatBits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
#endif
}

MOE_HOST_DEVICE inline float Fp8BitsFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
#endif
}

// Rounds q + rem / 2^shift to the nearest integer, ties to even.
MOE_HOST_DEVICE inline uint32_t Fp8RoundShift(uint32_t mant, int shift) {
  if (shift >= 32) return 0;  // below half of the smallest step
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// E4M3FN code of v: round to nearest even, |v| >= 464 (the tie between
// 448 and the non-number 480) saturates to +-448, NaN gives 0x7f.
MOE_HOST_DEVICE inline uint8_t E4M3FromF32(float v) {
  const uint32_t b = Fp8FloatBits(v);
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;          // NaN
  if (a >= 0x43e80000u) return sign | 0x7e;  // >= 464, inf included
  const int e = static_cast<int>(a >> 23);   // biased fp32 exponent
  if (e < 127 - 6) {
    // Below 2^-6: a count of 2^-9 steps. |v| = mant 2^(e - 150) (e >= 1),
    // so the count is mant 2^(e - 141); fp32 subnormals round to 0.
    if (e == 0) return sign;
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    return sign | static_cast<uint8_t>(Fp8RoundShift(mant, 141 - e));
  }
  // Normal: 3 of the 23 mantissa bits, rounded; a carry to 8 moves into the
  // exponent field, which the encoding absorbs.
  const uint32_t q = Fp8RoundShift(a & 0x7fffffu, 20);
  return sign | static_cast<uint8_t>(((e - 127 + 7) << 3) + q);
}

MOE_HOST_DEVICE inline float E4M3ToF32(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp = (c >> 3) & 0xfu, man = c & 0x7u;
  if (exp == 0xf && man == 0x7) return Fp8BitsFloat(0x7fc00000u | sign);
  if (exp == 0) {  // man 2^-9, exact in fp32
    return Fp8BitsFloat(Fp8FloatBits(static_cast<float>(man) * 0.001953125f) |
                        sign);
  }
  return Fp8BitsFloat(sign | ((exp - 7 + 127) << 23) | (man << 20));
}

// The scale of a block whose largest |value| is amax: values are stored as
// E4M3FromF32(v / scale). An all-zero block keeps 1 (its codes are 0). The
// scale is at least the smallest normal float (as core/fp8_rows): amax / 448
// of a block of subnormals can underflow to 0, and v / 0 would be NaN.
MOE_HOST_DEVICE inline float Fp8BlockScale(float amax) {
  return amax > 0.0f ? fmaxf(amax / kE4M3Max, 1.17549435e-38f) : 1.0f;
}

MOE_HOST_DEVICE inline int64_t Fp8Blocks(int64_t cols) {
  return (cols + kFp8Block - 1) / kFp8Block;
}

// Weights W [n, k]: floats between consecutive rows of blocks.
MOE_HOST_DEVICE inline int64_t Fp8WeightScaleLd(int64_t k) {
  return (Fp8Blocks(k) + kFp8ScaleAlign - 1) / kFp8ScaleAlign * kFp8ScaleAlign;
}
MOE_HOST_DEVICE inline int64_t Fp8WeightScaleFloats(int64_t n, int64_t k) {
  return Fp8Blocks(n) * Fp8WeightScaleLd(k);
}

// The rows a block-scaled matmul of m rows runs: m rounded up to a
// multiple of kFp8RowQuantum (0 stays 0).
MOE_HOST_DEVICE inline int64_t Fp8MatmulRows(int64_t m) {
  return (m + kFp8RowQuantum - 1) / kFp8RowQuantum * kFp8RowQuantum;
}

// Activations: the first scale of segment `g` whose rows start `begin` rows
// into the pass, for rows of `cols` columns. Each earlier segment's table
// holds at most kFp8RowQuantum - 1 padding rows, so segments in ascending
// order never overlap: base(g) + blocks * Fp8MatmulRows(rows(g)) <=
// base(g + 1).
MOE_HOST_DEVICE inline int64_t Fp8SegmentScaleBase(int64_t begin, int64_t g,
                                                   int64_t cols) {
  const int64_t first = (begin + (kFp8RowQuantum - 1) * g) * Fp8Blocks(cols);
  return (first + kFp8ScaleAlign - 1) / kFp8ScaleAlign * kFp8ScaleAlign +
         kFp8ScaleAlign * g;
}
// Row r (of the segment's m rows), block kb.
MOE_HOST_DEVICE inline int64_t Fp8ActScaleIndex(int64_t base, int64_t m,
                                                int64_t r, int64_t kb) {
  return base + kb * Fp8MatmulRows(m) + r;
}
// Floats a pass of `rows` rows in `segments` segments needs at most.
MOE_HOST_DEVICE inline int64_t Fp8ActScaleFloats(int64_t rows, int64_t segments,
                                                 int64_t cols) {
  return (rows + (kFp8RowQuantum - 1) * segments) * Fp8Blocks(cols) +
         kFp8ScaleAlign * (segments + 1);
}

}  // namespace moe::kernels

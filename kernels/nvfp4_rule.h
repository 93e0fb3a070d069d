// The NVFP4 rules (NVIDIA ModelOpt's 4-bit weights: E2M1 elements with one
// E4M3 scale per block of 16 and one fp32 scale per tensor), written once for
// the CPU packer and kernels, the host loaders and the CUDA dequantiser.
// Plain C++ that nvcc compiles for the device too; no CUDA types.
//
// Storage (ModelOpt checkpoints, quant_algo NVFP4): a weight [out, in] is
// `weight` U8 [out, in / 2] (E2M1 code pairs exactly as MXFP4 stores them:
// element 2j in the low nibble, see kernels/mxfp4_rule.h), `weight_scale`
// F8_E4M3 [out, in / 16] (one scale per 16 consecutive `in` values) and
// `weight_scale_2` F32 (the global scale). Value = E2M1(code) *
// E4M3(block scale) * global. ModelOpt's `input_scale` belongs to its FP4
// activations; the engine computes with fp32 activations and ignores it.
//
// Quantiser (--weight-dtype nvfp4 on unquantised checkpoints), ModelOpt's
// rule: global = amax(tensor) / (6 * 448) (1 for an all-zero tensor), each
// block's scale byte = E4M3(block_amax / 6 / global) (round to nearest even,
// so at most 448), and each element's code the E2M1 value nearest to
// v / (E4M3(scale byte) * global), ties to the even code, saturating at +-6;
// a block whose scale byte decodes to 0 gets zero codes. A row whose length
// is not a multiple of 16 ends in a shorter block, as with MXFP4.
#pragma once

#include <cstdint>

#include "kernels/fp8_rule.h"  // E4M3FromF32, E4M3ToF32
#include "kernels/host_device.h"
#include "kernels/mxfp4_rule.h"  // E2M1ToF32, E2M1FromF32

namespace moe::kernels {

inline constexpr int64_t kNvBlock = 16;  // values per E4M3 scale
inline constexpr float kE2M1Max = 6.0f;  // largest E2M1 magnitude

MOE_HOST_DEVICE inline int64_t NvBlocks(int64_t cols) {
  return (cols + kNvBlock - 1) / kNvBlock;
}

// True for the E4M3FN NaN codes (0x7f, 0xff): a checkpoint scale that the
// loaders refuse, because the packed kernels do not test for it.
MOE_HOST_DEVICE inline bool IsE4M3NaN(uint8_t c) { return (c & 0x7f) == 0x7f; }

// The global scale of a tensor whose largest |value| is amax (finite):
// amax / (6 * 448), or 1 for an all-zero tensor.
MOE_HOST_DEVICE inline float Nvfp4GlobalScale(float amax) {
  return amax > 0.0f ? amax / (kE2M1Max * kE4M3Max) : 1.0f;
}

// Quantises one block of n <= 16 finite values under `global` (> 0):
// writes n codes (one per byte, low 4 bits) and returns the E4M3 scale byte.
MOE_HOST_DEVICE inline uint8_t Nvfp4QuantizeBlock(const float* v, int64_t n,
                                                  float global,
                                                  uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = v[i] < 0.0f ? -v[i] : v[i];
    amax = a > amax ? a : amax;
  }
  const uint8_t s = E4M3FromF32(amax / kE2M1Max / global);
  const float scale = E4M3ToF32(s) * global;
  for (int64_t i = 0; i < n; ++i) {
    // A scale that rounded to 0 (a block far below the tensor's amax)
    // leaves the block 0; v / 0 would be inf or NaN.
    codes[i] = scale > 0.0f ? E2M1FromF32(v[i] / scale) : 0;
  }
  return s;
}

// The dequantised value of element j of a row given as packed code pairs,
// its E4M3 scale bytes (one per 16 elements) and the tensor's global scale.
MOE_HOST_DEVICE inline float Nvfp4Value(const uint8_t* pairs,
                                        const uint8_t* scales, float global,
                                        int64_t j) {
  const uint8_t byte = pairs[j / 2];
  const uint8_t code = (j & 1) ? (byte >> 4) : (byte & 0xf);
  return E2M1ToF32(code) * E4M3ToF32(scales[j / kNvBlock]) * global;
}

}  // namespace moe::kernels

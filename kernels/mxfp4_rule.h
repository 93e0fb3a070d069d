// The MXFP4 rules (OCP Microscaling Formats v1.0, E2M1 elements with one
// E8M0 scale per block of 32), written once for the CPU packer and kernels,
// the host loaders and the CUDA dequantiser. Plain C++ that nvcc compiles
// for the device too; no CUDA types.
//
// Storage (gpt-oss blocks/scales, DeepSeek-V4 fp4 experts): a weight
// [out, in] is stored row by row in blocks of 32 consecutive `in` values;
// each block has one E8M0 scale byte s (factor 2^(s - 127); 255 is NaN and
// refused at load) and 16 bytes of E2M1 codes, element 2j in the low nibble
// and 2j + 1 in the high nibble. A code's bit 3 is the sign, bits 0-2 index
// the magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6).
//
// Quantiser (--weight-dtype mxfp4 on bf16/fp32/FP8 checkpoints), the OCP MX
// rule: a block's shared exponent is floor(log2(amax)) - 2 (2 being E2M1's
// largest exponent, so amax lands in [4, 8) before rounding), clamped to
// E8M0's [-127, 127]; an all-zero block gets s = 127 (factor 1, all codes
// 0). Each element is v / 2^e rounded to the nearest E2M1 value, ties to
// the even code (0, 1, 2, 4 of the magnitudes), saturating at +-6. The sign
// bit is the value's sign bit (so -0 and small negatives give code 8, -0).
// A row whose length is not a multiple of 32 ends in a shorter block: the
// same codes as padding it with zeros.
#pragma once

#include <cstdint>

#include "kernels/fp8_rule.h"  // Fp8FloatBits, Fp8BitsFloat
#include "kernels/host_device.h"

namespace moe::kernels {

inline constexpr int64_t kMxBlock = 32;  // values per E8M0 scale
inline constexpr uint8_t kE8M0NaN = 255;
inline constexpr int kE8M0Bias = 127;
inline constexpr int kE2M1MaxExp = 2;  // 6 = 1.5 * 2^2

MOE_HOST_DEVICE inline int64_t MxBlocks(int64_t cols) {
  return (cols + kMxBlock - 1) / kMxBlock;
}

// The value of a 4-bit E2M1 code (bits above the low 4 are ignored).
MOE_HOST_DEVICE inline float E2M1ToF32(uint8_t code) {
  const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

// 2^(s - 127) for s in [0, 254], exactly (s = 0 is the subnormal 2^-127);
// NaN for 255.
MOE_HOST_DEVICE inline float E8M0ToF32(uint8_t s) {
  if (s == kE8M0NaN) return Fp8BitsFloat(0x7fc00000u);
  if (s == 0) return Fp8BitsFloat(0x00400000u);  // 2^-127, subnormal
  // The fp32 of exponent field s and zero mantissa.
  return Fp8BitsFloat(static_cast<uint32_t>(s) << 23);
}

// The E8M0 scale byte of a block whose largest |value| is amax (finite):
// floor(log2(amax)) - 2 + 127, clamped to [0, 254]; 127 for amax 0.
MOE_HOST_DEVICE inline uint8_t Mxfp4ScaleByte(float amax) {
  if (!(amax > 0.0f)) return kE8M0Bias;
  // The biased fp32 exponent is floor(log2(amax)) + 127 for normal amax; a
  // subnormal's floor(log2) is below -126, and so below the clamp.
  const int biased = static_cast<int>((Fp8FloatBits(amax) >> 23) & 0xff);
  const int s = biased - kE2M1MaxExp;
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 254 ? 254 : s));
}

// The E2M1 code nearest to y (ties to the even code), saturating at +-6.
// y is a block value already divided by its scale. NaN gives +-6: callers
// refuse non-finite blocks before quantising.
MOE_HOST_DEVICE inline uint8_t E2M1FromF32(float y) {
  const uint8_t sign = (Fp8FloatBits(y) >> 31) ? 8 : 0;
  const float a = y < 0.0f ? -y : y;
  // The midpoints between neighbouring magnitudes; at a midpoint the even
  // code (magnitude index 0, 2, 4, 6) wins, hence <= or < alternately.
  uint8_t m;
  if (a <= 0.25f) {
    m = 0;
  } else if (a < 0.75f) {
    m = 1;
  } else if (a <= 1.25f) {
    m = 2;
  } else if (a < 1.75f) {
    m = 3;
  } else if (a <= 2.5f) {
    m = 4;
  } else if (a < 3.5f) {
    m = 5;
  } else if (a <= 5.0f) {
    m = 6;
  } else {
    m = 7;
  }
  return sign | m;
}

// Quantises one block of n <= 32 finite values: writes n codes (one per
// byte, low 4 bits) and returns the scale byte. v / 2^e is computed as a
// multiplication by 2^-e, exact: 2^-e is a normal float for every e the
// rule gives ([-127, 125], s in [0, 252]) and v * 2^-e neither overflows nor
// loses bits that matter to the rounding (values far below the block's amax
// round to 0 either way).
MOE_HOST_DEVICE inline uint8_t Mxfp4QuantizeBlock(const float* v, int64_t n,
                                                  uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = v[i] < 0.0f ? -v[i] : v[i];
    amax = a > amax ? a : amax;
  }
  const uint8_t s = Mxfp4ScaleByte(amax);
  // 2^(127 - s): the fp32 of exponent field 254 - s, normal for every s
  // the rule gives (at most 252: a finite amax is below 2^128).
  const float inv = Fp8BitsFloat(static_cast<uint32_t>(254 - s) << 23);
  for (int64_t i = 0; i < n; ++i) codes[i] = E2M1FromF32(v[i] * inv);
  return s;
}

// The dequantised value of element j of a row given as packed code pairs
// and its scale bytes (one per 32 elements).
MOE_HOST_DEVICE inline float Mxfp4Value(const uint8_t* pairs,
                                        const uint8_t* scales, int64_t j) {
  const uint8_t byte = pairs[j / 2];
  const uint8_t code = (j & 1) ? (byte >> 4) : (byte & 0xf);
  return E2M1ToF32(code) * E8M0ToF32(scales[j / kMxBlock]);
}

}  // namespace moe::kernels

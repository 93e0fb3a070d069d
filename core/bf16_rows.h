// bf16 over whole buffers, in loops the compiler vectorises: the narrowing
// of step results for the wire, and the rounding that makes a step's routed
// output the same bf16 values whichever process computed it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe {

// dst[i] = the bf16 bits of src[i], rounded to nearest even (NaN stays NaN),
// exactly as F32ToBf16 (core/dtype.h) does one value.
void F32ToBf16Bits(const float* src, size_t count, uint16_t* dst);
// dst[i] = src[i] widened (exact). `src` may be unaligned.
void Bf16BitsToF32(const void* src, size_t count, float* dst);
// v[i] = the fp32 value of v[i] rounded to bf16.
void RoundToBf16(float* v, size_t count);

}  // namespace moe

// FP8 experts on a GPU, the host side: which way a device runs them, and
// one expert's weights laid out on the host exactly as the device keeps
// them (uploaded byte for byte by engine/cuda/cuda_weights.cc). Plain C++,
// no CUDA types: built into the CPU engine and tested on the CPU.
//
// The device form (scale layouts: kernels/fp8_rule.h):
//  - w13 [2 Ip, Hk] E4M3, Ip = I and Hk = H rounded up to 128: W1's rows,
//    zero rows up to Ip, W3's rows, zero rows up to 2 Ip, zero columns past
//    H. cuBLASLt's 128 x 128 weight blocks must not straddle W1 and W3
//    (their scales differ), so W3 starts on a block boundary; the gate-up
//    output is [rows, 2 Ip] and the SiLU-mul reads u at column Ip + i.
//  - w2 [H, Ik] E4M3, Ik = Ip, zero columns past I; the SiLU-mul writes h
//    [rows, Ik] with zeros there.
//  - a non-gated expert (no W1, engine/cuda/expert_image.h): w13 [Ip, Hk],
//    W3's rows then zero rows up to Ip; the gate-up output is [rows, Ip]
//    and the activation reads u at column i.
//  Every K is a whole number of 128-blocks (the quantised rows are padded
//  with zeros to match), so no matmul has a partial scale block along K;
//  real models (H, I multiples of 128) pad nothing.
//  - one fp32 scale per 128 x 128 block of each, as the checkpoint ships
//    them (DeepSeek-V3's weight_scale_inv) when its blocks tile ours, else
//    requantised from the dequantised values in 128 x 128 blocks (amax /
//    448, round to nearest even), as engine/weight_values.h does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"

namespace moe {

enum class Fp8GpuPath : int8_t {
  kBlockScaled,  // E4M3 weights on the device, cuBLASLt block-scaled FP8
  kDequantBf16,  // dequantised to bf16 on the device at load
};

struct Fp8PathChoice {
  Fp8GpuPath path = Fp8GpuPath::kDequantBf16;
  std::string reason;  // for the log line
};

// The way a device of compute capability major.minor runs FP8 experts of
// hidden size `hidden`, `local_experts` of them per pass. Block-scaled FP8
// needs sm_90: cuBLASLt's VEC128_32F and BLK128x128_32F scale modes exist
// only there (not on sm_80/sm_89, which have no such matmul, nor on sm_100+,
// which scale by VEC32_UE8M0 blocks instead); H a multiple of 16 (FP8 rows
// 16-byte aligned, bf16 output rows too); and at most kMaxFp8Segments
// experts per pass (kernels/cuda/kernels.h).
Fp8PathChoice ChooseFp8GpuPath(int cc_major, int cc_minor, int64_t hidden,
                               int64_t local_experts);

// A dimension rounded up to whole 128-blocks.
inline int64_t Fp8Pad(int64_t n) { return (n + 127) / 128 * 128; }
inline int64_t Fp8InterPad(int64_t inter) { return Fp8Pad(inter); }
inline int64_t Fp8DownK(int64_t inter) { return Fp8Pad(inter); }

struct Fp8ExpertImage {
  int64_t hidden = 0, inter = 0;  // hidden: the rows' width W
  bool gated = true;
  int64_t hidden_k = 0;          // Hk
  int64_t inter_pad = 0;         // Ip
  int64_t down_k = 0;            // Ik
  std::vector<uint8_t> w13;      // [GateUpCols(gated, Ip), Hk]
  std::vector<float> w13_scale;  // Fp8WeightScaleFloats(those rows, Hk)
  std::vector<uint8_t> w2;       // [H, Ik]
  std::vector<float> w2_scale;   // Fp8WeightScaleFloats(H, Ik)
};

// One expert's W1, W3 [I, H] and W2 [H, I] (any float dtype, FP8 with block
// scales included) in the device form; w1 null: a non-gated expert.
absl::StatusOr<Fp8ExpertImage> PackFp8Expert(const WeightTensor* w1,
                                             const WeightTensor& w3,
                                             const WeightTensor& w2);
inline absl::StatusOr<Fp8ExpertImage> PackFp8Expert(const WeightTensor& w1,
                                                    const WeightTensor& w3,
                                                    const WeightTensor& w2) {
  return PackFp8Expert(&w1, w3, w2);
}

// Devices without block-scaled FP8 dequantise the image into the bf16 form
// of the other path (w13 bf16 [GateUpCols(gated, I), H], w2 bf16 [H, I]) with
// one kernel per part: rows x cols codes at code_offset (row stride code_ld),
// their scales from scale_offset (rows of blocks scale_ld apart), written at
// dst_offset (row stride dst_ld) of w13 or (to_w2) w2.
struct Fp8DequantPart {
  bool to_w2 = false;
  int64_t rows = 0, cols = 0;
  int64_t code_offset = 0, code_ld = 0;
  int64_t scale_offset = 0, scale_ld = 0;
  int64_t dst_offset = 0, dst_ld = 0;
};
// W1 (gated experts only), W3 and W2, in that order.
std::vector<Fp8DequantPart> Fp8DequantParts(const Fp8ExpertImage& e);

// The value the device multiplies for w13 element [row, col] (row < its rows,
// col < Hk) or w2 element [row, col] (col < Ik): code times block scale. For
// host references and tests.
float Fp8W13Value(const Fp8ExpertImage& e, int64_t row, int64_t col);
float Fp8W2Value(const Fp8ExpertImage& e, int64_t row, int64_t col);

}  // namespace moe

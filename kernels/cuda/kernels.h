// CUDA kernels of the MoE layer: pure compute over raw device pointers and
// a stream, returning the status of their own launch (never an earlier
// call's leftover error: kernels/cuda/launch.cuh). bf16 values are passed as
// their bits (uint16_t) so that host code needs no CUDA types beyond the
// runtime API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/act_rule.h"

namespace moe::kernels::cuda {

// The CPU kernels' ids (kernels/cpu/routing.h) where both have the function.
// kScoreTopkSoftmax (gpt-oss): the choice on the logits themselves, the k
// chosen weighed by their softmax over those k.
enum ScoreFuncId : int32_t {
  kScoreSoftmax = 0,
  kScoreSigmoid = 1,
  kScoreSqrtSoftplus = 2,
  kScoreTopkSoftmax = 3,
};
enum GroupScoreId : int32_t { kGroupTop2Sum = 0, kGroupMax = 1 };

// The most experts and slots per token the fused routing kernel handles;
// also, its shared memory must fit kernels::RouteFitsSharedMemory(E, G)
// (kernels/routing_rule.h). Other layers route on the host.
inline constexpr int32_t kMaxRouteExperts = 4096;
inline constexpr int32_t kMaxRouteTopK = 64;

struct RouteArgs {
  const float* logits = nullptr;  // [tokens, E], fp32
  int64_t tokens = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int32_t score_func = kScoreSoftmax;
  const float* router_bias = nullptr;  // [E] or null: added to the logits
  const float* expert_bias = nullptr;  // [E] or null: for choosing only
  int32_t n_groups = 0;                // 0: no group limit
  int32_t topk_groups = 0;
  int32_t group_score = kGroupTop2Sum;
  // Hash routing (both or neither): token t's experts are row
  // tid2eid[token_ids[t]] of a [V, k] table, ids checked in [0, V) by the
  // caller; no top-k, no groups.
  const int32_t* tid2eid = nullptr;
  const int64_t* token_ids = nullptr;
  // Renormalise when `renorm` (kernels::RouteNormDenominator: +1e-20, or the
  // floor norm_min when > 0), then scale. (A capacity limit must come
  // before normalisation: such layers route on the host.)
  bool renorm = true;
  float route_scale = 1.0f;
  float norm_min = 0.0f;
  int32_t* idx = nullptr;     // [tokens, k] out, descending, ties to lower id
  float* weights = nullptr;   // [tokens, k] out
  int32_t* counts = nullptr;  // [E] accumulated when not null
};

// Fused routing, one block per token: router bias on the logits, scores
// (softmax, sigmoid, sqrt-softplus, or the logits for top-k softmax), bias,
// group-limited choice (top-2 sum or max), top-k with the lower-id tie rule
// or the hash table's row, gather, softmax over the chosen (top-k softmax),
// normalisation, scale, per-expert counts. NaN and tie rules of
// kernels/routing_rule.h. cudaErrorInvalidValue, launching nothing, for a
// layer outside the limits above.
cudaError_t RouteTopK(const RouteArgs& args, cudaStream_t stream);

// dst[j][:] = bf16(src[src_row[j]][:] * (scale ? scale[j] : 1)), fp32 src.
cudaError_t GatherRowsF32ToBf16(const float* src, int64_t cols,
                                const int32_t* src_row, const float* scale,
                                int64_t rows, uint16_t* dst,
                                cudaStream_t stream);
// dst[j][:] = src[src_row[j]][:] (bf16 rows); zeros where src_row[j] < 0
// (padding rows, engine/cuda/padded_pass.h).
// The row kernels here move 16 bytes per thread and access (8 bf16 values)
// when cols is a multiple of 8 and the row pointers are 16-byte aligned,
// else one value; the results are the same bits either way.
cudaError_t GatherRowsBf16(const uint16_t* src, int64_t cols,
                           const int32_t* src_row, int64_t rows, uint16_t* dst,
                           cudaStream_t stream);
// dst[dst_row[j]][:] = src[j][:] (bf16 rows); nothing for dst_row[j] < 0.
cudaError_t ScatterRowsBf16(const uint16_t* src, int64_t cols,
                            const int32_t* dst_row, int64_t rows, uint16_t* dst,
                            cudaStream_t stream);
// h[r][i] = bf16(silu(g[r][i]) * g[r][inter + i]) from fp32 g [rows, 2*inter].
cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t inter,
                    uint16_t* h, cudaStream_t stream);
// The same from bf16 g [rows, 2*inter] (what the expert GEMMs write: half
// the bytes to read), computed in fp32, with the layer's gated activation
// (kernels/act_rule.h; SiLU by default) in place of silu(g) * u.
cudaError_t SiluMulBf16(const uint16_t* gate_up, int64_t rows, int64_t inter,
                        uint16_t* h, cudaStream_t stream,
                        const GatedActParams& act = {});
// The same over any layout of the gate-up rows: g = gate_up[r * ld + i],
// u = gate_up[r * ld + up + i] (SiluMulBf16: ld 2 * inter, up inter). A
// non-gated expert's up rows alone are ld inter, up 0: g then reads u,
// which its activation (relu2) ignores. cudaErrorInvalidValue, launching
// nothing, when a row's u would pass ld.
cudaError_t ActRowsBf16(const uint16_t* gate_up, int64_t ld, int64_t up,
                        int64_t rows, int64_t inter, uint16_t* h,
                        cudaStream_t stream, const GatedActParams& act = {});
// Expert biases (gpt-oss), added to one expert's rows after its GEMM:
// rows[r * ld + c] = round(rows[r * ld + c] + bias[c]) for r < n, c < cols,
// in fp32 (bf16 rows rounded back to bf16).
cudaError_t AddBiasRowsBf16(uint16_t* rows, int64_t n, int64_t cols, int64_t ld,
                            const float* bias, cudaStream_t stream);
cudaError_t AddBiasRowsF32(float* rows, int64_t n, int64_t cols, int64_t ld,
                           const float* bias, cudaStream_t stream);
// y[t][:] = sum over s in [0, slots) with slot_row[t*slots+s] >= 0, in slot
// order, of w[t*slots+s] * out[slot_row[...]][:] (weight 1 when w is null);
// fp32 accumulation of bf16 expert outputs.
cudaError_t CombineSlots(int64_t tokens, int64_t slots, int64_t cols,
                         const float* w, const int32_t* slot_row,
                         const uint16_t* expert_out, float* y,
                         cudaStream_t stream);
// y[t][:] += add[t][:] * (gate_logit ? sigmoid(gate_logit[t]) : 1).
cudaError_t AddRows(float* y, const float* add, const float* gate_logit,
                    int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t ConvertF32ToBf16(const float* src, int64_t count, uint16_t* dst,
                             cudaStream_t stream);
// dst[i] = fp32 value of bf16 src[i].
cudaError_t ConvertBf16ToF32(const uint16_t* src, int64_t count, float* dst,
                             cudaStream_t stream);

// FP8 (kernels/cuda/fp8.cu), with the encoding, scale rule and scale
// layouts of kernels/fp8_rule.h. The rows of an expert pass form segments,
// one per expert, each its own cuBLASLt matmul with its own activation
// scale table: end[g] is the row (from the pass's first row) where segment
// g ends, ascending, end[count - 1] the pass's row count. Passed by value:
// the most segments one pass may have is kMaxFp8Segments.
inline constexpr int32_t kMaxFp8Segments = 256;
struct Fp8Segments {
  int32_t count = 0;
  int32_t end[kMaxFp8Segments] = {};
};

// Gathers and quantises activation rows, per row per 128 columns:
// row j = src[src_row ? src_row[j] : j] (bf16, `cols` values, row stride
// cols) becomes dst[j] (E4M3, row stride dst_ld >= cols, columns past cols
// written 0) with its block scales at
// Fp8ActScaleIndex(Fp8SegmentScaleBase(begin, g, cols), m, j - begin, kb)
// of `scale`, for j in segment g = [begin, begin + m).
cudaError_t QuantizeRowsFp8(const uint16_t* src, int64_t cols,
                            const int32_t* src_row, int64_t rows,
                            const Fp8Segments& segments, int64_t dst_ld,
                            uint8_t* dst, float* scale, cudaStream_t stream);

// SiLU-mul quantised for the down projection: h[r][i] = silu(g) * u (or
// the gated activation `act`, kernels/act_rule.h) in fp32, g = gate_up[r *
// gu_ld + i], u = gate_up[r * gu_ld + up + i] (bf16, what the gate-up GEMM
// wrote), i < inter, stored as QuantizeRowsFp8 stores row r (row stride h_ld >=
// inter, columns past inter written 0).
cudaError_t SiluMulQuantFp8(const uint16_t* gate_up, int64_t gu_ld, int64_t up,
                            int64_t inter, int64_t rows,
                            const Fp8Segments& segments, int64_t h_ld,
                            uint8_t* h, float* scale, cudaStream_t stream,
                            const GatedActParams& act = {});

// Block-scaled FP8 weights to bf16: dst[i][j] = bf16(E4M3ToF32(codes[i *
// code_ld + j]) * scale[(i / 128) * scale_ld + j / 128]) for i < rows,
// j < cols (the layout of Fp8WeightScaleLd; rounded once, as the CPU's
// dequantisation rounds).
cudaError_t DequantizeFp8ToBf16(const uint8_t* codes, int64_t rows,
                                int64_t cols, int64_t code_ld,
                                const float* scale, int64_t scale_ld,
                                uint16_t* dst, int64_t dst_ld,
                                cudaStream_t stream);

}  // namespace moe::kernels::cuda

// CUDA kernels of the MoE layer: pure compute over raw device pointers and
// a stream, returning the status of their own launch (never an earlier
// call's leftover error: kernels/cuda/launch.cuh). bf16 values are passed as
// their bits (uint16_t) so that host code needs no CUDA types beyond the
// runtime API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace moe::kernels::cuda {

enum ScoreFuncId : int32_t { kScoreSoftmax = 0, kScoreSigmoid = 1 };
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
  const float* expert_bias = nullptr;  // [E] or null: for choosing only
  int32_t n_groups = 0;                // 0: no group limit
  int32_t topk_groups = 0;
  int32_t group_score = kGroupTop2Sum;
  // Renormalise (+1e-20) when `renorm`, then scale. (A capacity limit must
  // come before normalisation: such layers route on the host.)
  bool renorm = true;
  float route_scale = 1.0f;
  int32_t* idx = nullptr;     // [tokens, k] out, descending, ties to lower id
  float* weights = nullptr;   // [tokens, k] out
  int32_t* counts = nullptr;  // [E] accumulated when not null
};

// Fused routing, one block per token: scores (softmax or sigmoid), bias,
// group-limited choice (top-2 sum or max), top-k with the lower-id tie rule,
// gather, normalisation, scale, per-expert counts. NaN and tie rules of
// kernels/routing_rule.h. cudaErrorInvalidValue, launching nothing, for a
// layer outside the limits above.
cudaError_t RouteTopK(const RouteArgs& args, cudaStream_t stream);

// dst[j][:] = bf16(src[src_row[j]][:] * (scale ? scale[j] : 1)), fp32 src.
cudaError_t GatherRowsF32ToBf16(const float* src, int64_t cols,
                                const int32_t* src_row, const float* scale,
                                int64_t rows, uint16_t* dst,
                                cudaStream_t stream);
// dst[j][:] = src[src_row[j]][:] (bf16 rows).
cudaError_t GatherRowsBf16(const uint16_t* src, int64_t cols,
                           const int32_t* src_row, int64_t rows, uint16_t* dst,
                           cudaStream_t stream);
// dst[dst_row[j]][:] = src[j][:] (bf16 rows).
cudaError_t ScatterRowsBf16(const uint16_t* src, int64_t cols,
                            const int32_t* dst_row, int64_t rows, uint16_t* dst,
                            cudaStream_t stream);
// h[r][i] = bf16(silu(g[r][i]) * g[r][inter + i]) from fp32 g [rows, 2*inter].
cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t inter,
                    uint16_t* h, cudaStream_t stream);
// The same from bf16 g [rows, 2*inter] (what the expert GEMMs write: half
// the bytes to read), computed in fp32.
cudaError_t SiluMulBf16(const uint16_t* gate_up, int64_t rows, int64_t inter,
                        uint16_t* h, cudaStream_t stream);
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

}  // namespace moe::kernels::cuda

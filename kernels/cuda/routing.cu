#include <cfloat>
#include <climits>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/routing_rule.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kWarps = kBlock / 32;

constexpr float kNegInf = -__builtin_huge_valf();

// The kernel's fixed shared arrays, within what routing_rule.h reserves.
static_assert(2 * kWarps * 4 + 2 * kMaxRouteTopK * 4 <=
              kernels::kRouteStaticSharedBytes);

// (key, index) ordering of the routing rules (kernels/routing_rule.h).
__device__ __forceinline__ bool Better(float v, int i, float bv, int bi) {
  return RanksBefore(v, i, bv, bi);
}

// Block-wide reductions; `scratch` holds kWarps partials.
__device__ float BlockMax(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

__device__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0;
  for (int w = 0; w < kWarps; ++w) s += scratch[w];
  __syncthreads();
  return s;
}

__device__ void BlockArgMax(float* v, int* i, float* sv, int* si) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, *v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, *i, o);
    if (Better(ov, oi, *v, *i)) {
      *v = ov;
      *i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    sv[threadIdx.x >> 5] = *v;
    si[threadIdx.x >> 5] = *i;
  }
  __syncthreads();
  *v = sv[0];
  *i = si[0];
  for (int w = 1; w < kWarps; ++w) {
    if (Better(sv[w], si[w], *v, *i)) {
      *v = sv[w];
      *i = si[w];
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kBlock) RouteKernel(RouteArgs a) {
  extern __shared__ float smem[];
  const int E = a.num_experts, G = a.n_groups;
  float* s = smem;    // scores [E]
  float* c = s + E;   // choice scores [E]
  float* gs = c + E;  // group scores [G]
  unsigned char* taken = reinterpret_cast<unsigned char*>(gs + G);  // [E]
  unsigned char* kept = taken + E;                                  // [G]
  __shared__ float red_v[kWarps];
  __shared__ int red_i[kWarps];
  __shared__ float sel_w[kMaxRouteTopK];
  __shared__ int32_t sel_i[kMaxRouteTopK];

  const int64_t t = blockIdx.x;
  const float* l = a.logits + t * E;
  // gpt-oss's router bias moves the logits (so choice and weights).
  for (int e = threadIdx.x; e < E; e += kBlock) {
    s[e] =
        RouteLogit(a.router_bias != nullptr ? l[e] + a.router_bias[e] : l[e]);
  }
  __syncthreads();
  if (a.score_func == kScoreSigmoid) {
    for (int e = threadIdx.x; e < E; e += kBlock)
      s[e] = 1.0f / (1.0f + expf(-s[e]));
  } else if (a.score_func == kScoreSqrtSoftplus) {
    for (int e = threadIdx.x; e < E; e += kBlock) s[e] = SqrtSoftplus(s[e]);
  } else if (a.score_func == kScoreTopkSoftmax) {
    // The choice and the weights start from the logits themselves.
  } else {
    float m = kNegInf;
    for (int e = threadIdx.x; e < E; e += kBlock) m = fmaxf(m, s[e]);
    m = BlockMax(m, red_v);
    float sum = 0;
    for (int e = threadIdx.x; e < E; e += kBlock) {
      s[e] = expf(s[e] - m);
      sum += s[e];
    }
    const float inv = 1.0f / BlockSum(sum, red_v);
    for (int e = threadIdx.x; e < E; e += kBlock) s[e] *= inv;
  }
  for (int e = threadIdx.x; e < E; e += kBlock) {
    c[e] = RouteKey(a.expert_bias != nullptr ? s[e] + a.expert_bias[e] : s[e]);
    taken[e] = 0;
  }
  __syncthreads();

  if (a.tid2eid != nullptr) {
    // Hash routing: the table row in stored order, no top-k, no groups.
    if (threadIdx.x == 0) {
      HashedRow(a.tid2eid + a.token_ids[t] * a.top_k, s, a.top_k, sel_i, sel_w);
    }
    __syncthreads();
  } else if (G > 0) {
    const int size = E / G;
    for (int g = threadIdx.x; g < G; g += kBlock) {
      float first = kNegInf, second = kNegInf;
      for (int j = 0; j < size; ++j) {
        const float v = c[g * size + j];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      gs[g] = RouteKey(a.group_score == kGroupMax ? first : first + second);
      kept[g] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int j = 0; j < a.topk_groups; ++j) {
        int best = -1;
        for (int g = 0; g < G; ++g) {
          if (!kept[g] && (best < 0 || Better(gs[g], g, gs[best], best))) {
            best = g;
          }
        }
        kept[best] = 1;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += kBlock) {
      if (!kept[e / size]) c[e] = kNegInf;
    }
    __syncthreads();
  }

  for (int j = 0; a.tid2eid == nullptr && j < a.top_k; ++j) {
    float bv = kNegInf;
    int bi = INT_MAX;
    for (int e = threadIdx.x; e < E; e += kBlock) {
      if (!taken[e] && Better(c[e], e, bv, bi)) {
        bv = c[e];
        bi = e;
      }
    }
    BlockArgMax(&bv, &bi, red_v, red_i);
    if (threadIdx.x == 0) {
      taken[bi] = 1;
      sel_i[j] = bi;
      sel_w[j] = s[bi];
    }
    __syncthreads();
  }

  if (threadIdx.x == 0) {
    // The CPU path's per-token steps (kernels/routing_rule.h).
    if (a.score_func == kScoreTopkSoftmax) SoftmaxOverChosenRow(sel_w, a.top_k);
    NormalizeAndScaleRow(sel_w, a.top_k, a.renorm, a.route_scale, a.norm_min);
    for (int j = 0; j < a.top_k; ++j) {
      a.idx[t * a.top_k + j] = sel_i[j];
      a.weights[t * a.top_k + j] = sel_w[j];
      if (a.counts != nullptr) atomicAdd(a.counts + sel_i[j], 1);
    }
  }
}

}  // namespace

cudaError_t RouteTopK(const RouteArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  if (a.num_experts <= 0 || a.num_experts > kMaxRouteExperts || a.top_k <= 0 ||
      a.top_k > kMaxRouteTopK || a.top_k > a.num_experts || a.n_groups < 0 ||
      (a.n_groups > 0 && a.num_experts % a.n_groups != 0) ||
      (a.n_groups > 0 && (a.topk_groups < 0 || a.topk_groups > a.n_groups)) ||
      a.score_func < kScoreSoftmax || a.score_func > kScoreTopkSoftmax ||
      (a.tid2eid == nullptr) != (a.token_ids == nullptr) ||
      (a.tid2eid != nullptr && a.n_groups > 0) || !(a.norm_min >= 0.0f) ||
      !kernels::RouteFitsSharedMemory(a.num_experts, a.n_groups)) {
    return cudaErrorInvalidValue;
  }
  return Launch(
      RouteKernel, dim3(static_cast<unsigned>(a.tokens)), dim3(kBlock),
      kernels::RouteDynamicSharedBytes(a.num_experts, a.n_groups), stream, a);
}

}  // namespace moe::kernels::cuda

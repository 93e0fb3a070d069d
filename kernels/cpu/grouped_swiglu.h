// Grouped SwiGLU over experts: for every row i of group g,
//   out[i] = W2_g (silu(W1_g in[i]) * (W3_g in[i]))
// with W1/W3 fused into one packed [2*PaddedInter, hidden] weight and W2 packed
// as [hidden, PaddedInter]. Rows are given as pointers so the permutation of
// tokens to experts (and back) needs no copies. Plan, then run: the plan cuts
// the work into tasks; the run executes them on `num_threads` OpenMP threads.
#pragma once

#include <cstdint>

#include "kernels/act_rule.h"
#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu {

struct GroupedSwiglu {
  int64_t num_groups = 0;
  const int64_t* group_offsets = nullptr;  // [num_groups + 1], into the rows
  const float* const* in_rows = nullptr;   // [total], each `hidden` long
  float* const* out_rows = nullptr;        // [total], each `hidden` long
  const void* const* w13 = nullptr;        // [num_groups] packed gate/up
  const void* const* w2 = nullptr;         // [num_groups] packed down
  WeightFormat format = WeightFormat::kF32;
  int64_t hidden = 0;
  int64_t inter = 0;  // unpadded; the kernels pad to PaddedInter(inter)
  // The 2026 expert options (gpt-oss, DeepSeek-V4): per-group biases, each
  // array null or [num_groups] pointers (b1, b3: [inter]; b2: [hidden]), and
  // the activation (kernels/act_rule.h). With any of them the gate/up GEMM
  // stores g and u (workspace `gu`) and the activation runs after it:
  //   out[i] = W2_g act(W1_g in[i] + b1_g, W3_g in[i] + b3_g) + b2_g.
  const float* const* b1 = nullptr;
  const float* const* b3 = nullptr;
  const float* const* b2 = nullptr;
  int32_t act = kActSilu;
  float act_alpha = 1.702f;
  float act_limit = 7.0f;
  float act_beta = 1.0f;         // situ
  float act_linear_beta = 0.0f;  // situ
  // Non-gated experts (relu2): w13 holds the up projection alone, packed
  // [PaddedInter(inter), hidden], and out[i] = W2_g act(W3_g in[i] + b3_g)
  // + b2_g; the gate/up GEMM then writes u straight into h.
  bool gated = true;
  // The fused SiLU epilogue covers the plain case.
  bool plain() const {
    return gated && b1 == nullptr && b3 == nullptr && b2 == nullptr &&
           act == kActSilu;
  }
};

struct SwigluTask {
  int32_t phase;  // 0: gate/up + SiLU-mul into h; 1: down into out
  int32_t group;
  int64_t row_begin, row_end;  // global row indices
  int64_t panel_begin, panel_end;
};

// Writes the tasks into `tasks` when `capacity` allows and returns how many
// there are; call with capacity 0 to size the buffer.
int64_t PlanGroupedSwiglu(const GroupedSwiglu& problem, int num_threads,
                          SwigluTask* tasks, int64_t capacity);

// Runs planned tasks. `h` is a workspace of total_rows * PaddedInter(inter)
// floats and `h_rows` one of total_rows pointers; unless problem.plain(),
// `gu` is one of total_rows * 2 * PaddedInter(inter) floats and `gu_rows`
// of total_rows pointers (else both may be null). Returns 0.
int RunGroupedSwiglu(const GroupedSwiglu& problem, const SwigluTask* tasks,
                     int64_t num_tasks, float* h, float** h_rows,
                     int num_threads, float* gu = nullptr,
                     float** gu_rows = nullptr);

// C = A W^T over all panels of one packed weight (store epilogue), split
// over rows and panels on `num_threads` threads. For the router's gate.
void ParallelGemm(const float* const* a_rows, int64_t m, int64_t k,
                  const void* packed, WeightFormat format, int64_t n_out,
                  float* const* out_rows, int num_threads);

}  // namespace moe::kernels::cpu

// Runs SwiGLU experts over rows given by pointer: the routed experts a
// process owns (grouped GEMM) and the shared expert. Owns its workspaces, so
// repeated calls at the same or smaller sizes allocate nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/layer_weights.h"
#include "kernels/cpu/grouped_swiglu.h"

namespace moe {

class ExpertRunner {
 public:
  // Local expert g (global id expert_begin + g) maps rows
  // [offsets[g], offsets[g+1]) of in_rows to the same rows of out_rows.
  // offsets has num_local_experts() + 1 entries.
  absl::Status RunRouted(const LayerWeights& w,
                         absl::Span<const int64_t> offsets,
                         const float* const* in_rows, float* const* out_rows,
                         int num_threads);

  // Computes out[t] = S(x[t]) for n rows, times sigmoid(x[t] . g) with a shared
  // gate.
  absl::Status RunShared(const LayerWeights& w, const float* x, int64_t n,
                         float* out, int num_threads);

 private:
  void Run(const kernels::cpu::GroupedSwiglu& problem, int num_threads);

  std::vector<const void*> w13_;
  std::vector<const void*> w2_;
  std::vector<kernels::cpu::SwigluTask> tasks_;
  std::vector<const float*> b1_, b3_, b2_;
  std::vector<float> h_;
  std::vector<float*> h_rows_;
  std::vector<float> gu_;  // g and u before a non-fused activation
  std::vector<float*> gu_rows_;
  std::vector<const float*> shared_in_;
  std::vector<float*> shared_out_;
  std::vector<float> normed_;  // the shared expert's pre-normed rows
};

}  // namespace moe

// One MoE layer's weights on a GPU, uploaded once: experts in bf16 (gate and
// up fused into one [2I, W] matrix, or up alone [I, W] for a non-gated
// expert: engine/cuda/expert_image.h; then down [W, I]; W the rows' width,
// config.expert_width() for routed experts, H for the shared one) or, with
// FP8 weights
// on sm_90, E4M3 with 128 x 128 block scales in the form of
// engine/cuda/fp8_image.h; the router's gate, expert bias and shared-expert
// gate in fp32. FP8 weights on other devices are uploaded as E4M3 and
// dequantised to the bf16 form on the device.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/expert_image.h"
#include "engine/cuda/fp8_image.h"
#include "engine/layer_weights.h"
#include "kernels/act_rule.h"

namespace moe {

struct CudaExpert {
  DeviceBuffer w13;  // bf16 [GateUpCols(gated, inter), W]: W1 rows then W3
                     // rows, or W3 rows alone (fp8: E4M3
                     // [GateUpCols(gated, inter_pad), hidden_k])
  DeviceBuffer w2;   // bf16 [W, inter] (fp8: E4M3 [W, down_k])
  int64_t inter = 0;
  // False: no W1 (relu2 of u alone, engine/cuda/expert_image.h).
  bool gated = true;
  // Block-scaled FP8 (engine/cuda/fp8_image.h): the scales of w13 and w2
  // (kernels/fp8_rule.h layouts), w13's row length, W3's first row and
  // w2's row length.
  bool fp8 = false;
  DeviceBuffer w13_scale, w2_scale;
  int64_t hidden_k = 0, inter_pad = 0, down_k = 0;
  // The expert's gated activation: config.act, or for the shared expert
  // shared_act where the layer gives it (SharedGatedActOf).
  kernels::GatedActParams act;
  // Routed experts with config.expert_bias (gpt-oss; gated only), fp32
  // [inter], [inter] and [W]: added after the gate-up and down GEMMs. Empty
  // otherwise.
  DeviceBuffer b1, b3, b2;
  bool has_bias() const { return b2.size() > 0; }
  // The gate-up GEMM's output columns and where u starts in them (bf16
  // form; the FP8 form pads inter to inter_pad).
  int64_t gate_up_cols() const {
    return GateUpCols(gated, fp8 ? inter_pad : inter);
  }
  int64_t up_col() const { return UpCol(gated, fp8 ? inter_pad : inter); }
  size_t bytes() const {
    return w13.size() + w2.size() + w13_scale.size() + w2_scale.size() +
           b1.size() + b3.size() + b2.size();
  }
};

struct CudaLayerWeights {
  int64_t layer = 0;
  MoeLayerConfig config;
  bool has_gate = false;
  DeviceBuffer gate;               // fp32 [E, H]
  std::vector<float> expert_bias;  // host copy, for routing on the host
  DeviceBuffer expert_bias_dev;    // fp32 [E]
  // 2026 router tables (config.router_bias, config.hash_routed()): host
  // copies for routing on the host, device copies for the fused kernel.
  std::vector<float> router_bias;  // [E]
  DeviceBuffer router_bias_dev;
  std::vector<int32_t> tid2eid;  // [hash_vocab, k]
  DeviceBuffer tid2eid_dev;
  bool has_shared = false;
  CudaExpert shared;
  DeviceBuffer shared_gate;  // fp32 [1, H]
  int64_t expert_begin = 0, expert_end = 0;
  std::vector<CudaExpert> experts;
  int64_t num_local_experts() const { return expert_end - expert_begin; }
};

// Uploads to the current CUDA device. `options` as for LoadLayerWeights,
// with dtype kBF16, kFP8, kMXFP4 or kNVFP4 (resolved: never kAuto; MXFP4
// and NVFP4 routed experts are kept as their bf16 values); `fp8_path` says how
// this device keeps FP8 experts (ignored for the others).
absl::StatusOr<std::unique_ptr<CudaLayerWeights>> UploadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options,
    Fp8GpuPath fp8_path = Fp8GpuPath::kDequantBf16);

}  // namespace moe

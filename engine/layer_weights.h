// One MoE layer's weights in the engine's packed form: the router's gate
// (always fp32), the shared expert, and a contiguous range of routed experts,
// each packed once at load for the CPU kernels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/aligned_buffer.h"
#include "core/model_source.h"
#include "kernels/act_rule.h"
#include "kernels/cpu/packed_gemm.h"

namespace moe {

// The experts' storage in memory. kFP8: e4m3 codes plus fp32 scales per
// 128 x 128 block (see kernels/cpu/packed_gemm.h). kMXFP4: E2M1 codes with
// one E8M0 scale per 32 input values (kernels/mxfp4_rule.h), routed experts
// only: the shared expert keeps its checkpoint's storage (as under kAuto).
// kNVFP4: E2M1 codes with one E4M3 scale per 16 input values and an fp32
// global scale per tensor (kernels/nvfp4_rule.h), routed experts only, as
// kMXFP4. kAuto: whatever the checkpoint stores (MXFP4 stays MXFP4, NVFP4
// stays NVFP4, FP8 stays FP8, bf16 stays bf16, anything else fp32),
// resolved by ResolveWeightDType before anything is loaded.
enum class WeightDType { kF32, kBF16, kFP8, kAuto, kMXFP4, kNVFP4 };
absl::string_view WeightDTypeName(WeightDType d);
// Parses "f32", "bf16", "fp8", "mxfp4", "nvfp4" or "auto" (and a few spellings
// of each).
absl::StatusOr<WeightDType> ParseWeightDType(absl::string_view text);
// `requested`, or for kAuto the storage type of `source`'s routed experts
// (expert 0 of its first MoE layer): MXFP4 -> kMXFP4, NVFP4 -> kNVFP4,
// F8_E4M3 -> kFP8, BF16 -> kBF16, others -> kF32.
absl::StatusOr<WeightDType> ResolveWeightDType(WeightDType requested,
                                               const ModelSource& source);
// The shared expert's dtype when the routed experts' is `routed` (resolved):
// the same, except under kMXFP4 and kNVFP4, where the shared expert keeps
// the storage type of its checkpoint tensor (as kAuto resolves it).
absl::StatusOr<WeightDType> SharedExpertDType(WeightDType routed,
                                              const ModelSource& source);

struct PackedWeight {
  kernels::cpu::WeightFormat format = kernels::cpu::WeightFormat::kF32;
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features (padded for the down projection)
  // kFP8: e4m3 codes with their scales inside each panel; kMXFP4: E2M1
  // code pairs and E8M0 scales inside each panel; kNVFP4: E2M1 code pairs,
  // E4M3 scales and column scales inside each panel.
  AlignedBuffer data;
  const void* ptr() const { return data.data(); }
  size_t bytes() const { return data.size(); }
};

// SwiGLU expert: fused gate/up [2*PaddedInter(I), W] and down [W,
// PaddedInter], W being the expert's row width (config.expert_width() for a
// routed expert, H for the shared one). A non-gated expert (config.gated
// false) packs its up projection alone as w13 [PaddedInter(I), W].
struct ExpertWeights {
  PackedWeight w13;
  PackedWeight w2;
  int64_t inter = 0;
  // Routed experts with config.expert_bias (gpt-oss), fp32: g = x W1^T + b1,
  // u = x W3^T + b3, out = act(g, u) W2^T + b2. Empty otherwise.
  std::vector<float> b1;  // [inter]
  std::vector<float> b3;  // [inter]
  std::vector<float> b2;  // [hidden]
  bool has_bias() const { return !b2.empty(); }
  size_t bytes() const {
    return w13.bytes() + w2.bytes() +
           (b1.size() + b3.size() + b2.size()) * sizeof(float);
  }
};

struct LayerWeights {
  int64_t layer = 0;
  MoeLayerConfig config;
  WeightDType dtype = WeightDType::kF32;  // resolved: never kAuto

  bool has_gate = false;
  PackedWeight gate;  // [E + Z, H], fp32
  // The router's rows are E + Z (config.router_rows()): the zero experts'
  // rows follow the routed experts' in the gate and both biases.
  std::vector<float> expert_bias;  // [E + Z] when config.use_bias
  std::vector<float> router_bias;  // [E + Z] when config.router_bias
  std::vector<float> output_bias;  // [H] when config.output_bias
  // [hash_vocab, k] when config.hash_routed(): row v is the k experts of
  // token id v, in stored order; every id checked in [0, E), distinct per row.
  std::vector<int32_t> tid2eid;
  std::vector<float> gate_scale;        // [H] when config.router_prenorm
  std::vector<float> per_expert_scale;  // [E] when config.per_expert_scale
  // The routed experts' frame (engine/expert_frame.h), loaded with the
  // gate: the latent projections (kept bf16 when stored so, else fp32)
  // and their biases and norm, or Gemma 4's branch norms.
  PackedWeight latent_w1;  // [Lt, H]
  PackedWeight latent_w2;  // [H, Lt]
  std::vector<float> latent_b1, latent_b2, latent_norm;
  std::vector<float> experts_in_norm, experts_out_norm;

  bool has_shared = false;
  ExpertWeights shared;
  std::vector<float> shared_gate;  // [H] when config.shared_gate
  // [H] each when config.branch_norms: around the shared expert.
  std::vector<float> shared_in_norm, shared_out_norm;

  int64_t expert_begin = 0;  // routed experts [expert_begin, expert_end)
  int64_t expert_end = 0;
  // The logical expert of each local slot: [expert_begin, expert_end), or
  // the slot list of a redundant placement (engine/placement.h), where an
  // expert may sit in several workers' slots.
  std::vector<int32_t> expert_ids;
  std::vector<ExpertWeights> experts;  // one per local slot

  int64_t num_local_experts() const {
    return static_cast<int64_t>(experts.size());
  }
  // Returns the bytes of one routed expert's packed weights.
  size_t expert_bytes() const {
    return experts.empty() ? 0 : experts.front().bytes();
  }
};

struct LoadOptions {
  WeightDType dtype = WeightDType::kF32;  // kAuto: resolved per source
  // Says whether to load the router side: gate, expert bias, router bias and
  // tid2eid.
  bool load_gate = true;
  bool load_shared = true;  // router side: shared expert
  int64_t expert_begin = 0;
  int64_t expert_end = -1;  // -1: all experts
  // Per MoE layer, the logical expert of each local slot (a redundant
  // placement's slot list), instead of [expert_begin, expert_end).
  std::map<int64_t, std::vector<int32_t>> layer_experts;
  int num_threads = 1;
  int64_t only_layer = -1;  // backends: load just this MoE layer (-1: all)
};

// Returns the expert range [begin, end) that `options` asks for (end -1: all),
// INVALID_ARGUMENT when it is not inside [0, num_experts].
absl::StatusOr<std::pair<int64_t, int64_t>> ResolveExpertRange(
    const LoadOptions& options, int64_t num_experts);

// Returns the logical expert of each local slot of `layer`: its layer_experts
// list (INVALID_ARGUMENT for an id outside [0, num_experts)), else the range.
absl::StatusOr<std::vector<int32_t>> ResolveExpertList(
    const LoadOptions& options, int64_t layer, int64_t num_experts);

// Bytes one routed expert of `config` takes packed for the CPU kernels in
// `dtype` (resolved: not kAuto): what LayerWeights::expert_bytes() gives,
// from the sizes alone (GetModelInfo reports it without holding experts).
int64_t PackedExpertBytes(const MoeLayerConfig& config, WeightDType dtype);

// Packs one plain 2-D weight [n, k] (rows in order, k = its width) for the
// CPU kernels in `dtype` (not kAuto). For tests and for loaders that pack a
// tensor made by MakeMxfp4Tensor or MakeNvfp4Tensor (engine/weight_values.h)
// directly.
absl::StatusOr<PackedWeight> PackWeight(const WeightTensor& t,
                                        WeightDType dtype);

// Returns the layer's gated activation (config.act, act_alpha, act_limit) in
// the form the CPU and CUDA kernels take (kernels/act_rule.h).
kernels::GatedActParams GatedActOf(const MoeLayerConfig& config);
// The shared expert's: shared_act and shared_act_limit when the layer gives
// them (Step-3.5), else the routed experts' (GatedActOf).
kernels::GatedActParams SharedGatedActOf(const MoeLayerConfig& config);

// An fp32 vector of the checkpoint (`expert` -1: the layer's own), checked
// against the layer's config: biases, scales and norms, for every backend's
// loader (a device backend keeps some on the host or uploads them as they
// are).
absl::StatusOr<std::vector<float>> LoadWeightVector(const ModelSource& src,
                                                    int64_t layer,
                                                    WeightRole role,
                                                    int64_t expert = -1);

// A hash-routed layer's table [hash_vocab, k] as int32 ids, each checked in
// [0, E) and distinct within its row: a bad table is refused at load (the
// tensor named), never routed. For every backend's loader.
absl::StatusOr<std::vector<int32_t>> LoadTid2Eid(const ModelSource& src,
                                                 int64_t layer);

absl::StatusOr<std::unique_ptr<LayerWeights>> LoadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options);

}  // namespace moe

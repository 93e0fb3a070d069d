// Where an MoE layer's weights come from: a Hugging Face checkpoint, the
// synthetic model, or a test fixture. The engine asks for tensors by role,
// never by file-specific name, so a worker can fetch just its experts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/moe_config.h"

namespace moe {

enum class WeightRole {
  kGate,        // [E + Z, H]: the router's rows, zero experts' included
  kExpertBias,  // [E + Z]
  kW1,          // expert gate proj [I, H]
  kW3,          // expert up proj   [I, H]
  kW2,          // expert down proj [H, I]
  kSharedW1,    // [S, H]
  kSharedW3,    // [S, H]
  kSharedW2,    // [H, S]
  kSharedGate,  // [1, H]
  // 2026 (tests/golden/README.md):
  kRouterBias,  // [E + Z], config.router_bias: added to the logits
  kB1,          // expert gate proj bias [I], config.expert_bias
  kB3,          // expert up proj bias [I]
  kB2,          // expert down proj bias [H]
  kTid2Eid,     // [hash_vocab, k] integer expert ids, config.hash_vocab
  // 2026b/c (LatentMoE, Gemma 4); with config.latent = Lt the routed
  // experts' W1/W3 are [I, Lt] and W2 [Lt, I].
  kLatentW1,        // [Lt, H], H -> latent before dispatch
  kLatentW2,        // [H, Lt], latent -> H after the combine
  kLatentB1,        // [Lt], config.latent_bias
  kLatentB2,        // [H], config.latent_bias
  kLatentNorm,      // [Lt], config.latent_norm
  kGateScale,       // [H], config.router_prenorm
  kPerExpertScale,  // [E], config.per_expert_scale
  kExpertsInNorm,   // [H], config.branch_norms
  kExpertsOutNorm,  // [H]
  kSharedInNorm,    // [H]
  kSharedOutNorm,   // [H]
  // 2026d: y += output.bias once per token, config.output_bias (JetMoE).
  kOutputBias,  // [H]
};
// Whether a role is a vector, which a checkpoint may also store as [1, n].
bool IsVectorRole(WeightRole role);
const char* WeightRoleName(WeightRole role);

// A weight tensor: a view into a mapped file, or owned bytes.
struct WeightTensor {
  std::string name;  // For error messages: file and tensor name.
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  std::vector<std::byte> owned;  // Backs `data` when not a view.
  // Block-quantised FP8 weights (DeepSeek-V3's weight_scale_inv): a 2-D
  // tensor's value [i][j] is code [i][j] times
  // block_scale[(i / block_rows) * ceil(cols / block_cols) + j / block_cols].
  // Empty for every other tensor.
  std::vector<float> block_scale;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // MXFP4 weights (kernels/mxfp4_rule.h; made by engine/weight_values.h's
  // MakeMxfp4Tensor): `shape` is the logical [out, in], `dtype` kU8, `data`
  // out * in / 2 bytes of E2M1 code pairs (row-major, element 2j in the low
  // nibble) and `mx_scale` the out * in / 32 E8M0 bytes, one per 32
  // consecutive values of a row. Empty for every other tensor.
  std::vector<uint8_t> mx_scale;
  bool is_mxfp4() const { return !mx_scale.empty(); }
  // NVFP4 weights (kernels/nvfp4_rule.h; made by engine/weight_values.h's
  // MakeNvfp4Tensor): `shape` [out, in], `dtype` kU8, `data` the code pairs
  // as for MXFP4, `nv_scale` the out * in / 16 E4M3 bytes, one per 16
  // consecutive values of a row, and `nv_global` the tensor's fp32 global
  // scale (ModelOpt's weight_scale_2). Empty for every other tensor.
  std::vector<uint8_t> nv_scale;
  float nv_global = 1.0f;
  bool is_nvfp4() const { return !nv_scale.empty(); }
  int64_t numel() const;
};

// The expected shape of a role's tensor for a layer config.
std::vector<int64_t> ExpectedShape(const MoeLayerConfig& config,
                                   WeightRole role);

struct ModelInfo {
  std::string family;      // model_type, or "synthetic"
  std::string source;      // checkpoint directory or synthetic description
  int64_t num_layers = 0;  // decoder layers in the model
  std::vector<int64_t> moe_layers;  // the MoE layer ids, ascending
  // Every MoE layer's config, except for the layers in layer_overrides:
  // the model's first MoE layer's.
  MoeLayerConfig layer;
  // MoE layers whose config differs from `layer`'s (DeepSeek-V4's hash-routed
  // first layers beside its top-k ones, Step-3.5's per-layer swiglustep
  // limits, Hunyuan's per-layer moe_topk): each one's whole config, which
  // may differ from `layer` in the routing options, the activation, top_k,
  // inter and shared_inter only (CheckLayerOverrides). The width of the rows
  // on the wire (hidden, latent), the expert count and the placement stay
  // one per model. Whatever routes, loads or runs a layer's experts reads
  // LayerConfig(layer).
  std::map<int64_t, MoeLayerConfig> layer_overrides;
  // ERNIE-4.5-VL: MoE layer L's vision experts, served as MoE layer
  // vision_layers[L] (num_layers + L, in moe_layers, its config in
  // layer_overrides). A request names L and carries each row's token type;
  // the router sends the vision rows to that layer. Empty for every other
  // family.
  std::map<int64_t, int64_t> vision_layers;
  // The decoder layer whose vision experts MoE layer `layer` is, if any.
  std::optional<int64_t> VisionOwner(int64_t layer) const;
  // The MoE layers a request may name: moe_layers less the vision layers.
  std::vector<int64_t> RequestLayers() const;
  bool HasLayer(int64_t layer) const;
  // The config of MoE layer `layer`: its override, else `layer`. The one
  // accessor for anything that routes or loads a given layer.
  const MoeLayerConfig& LayerConfig(int64_t layer) const;
  // The hash-routed MoE layers (ascending), which need token ids.
  std::vector<int64_t> HashLayers() const;
  // The largest hash_vocab of any MoE layer; 0 when none is hash-routed.
  int64_t MaxHashVocab() const;
  // The largest top_k of any MoE layer (what sizes a step's slots).
  int64_t MaxTopK() const;
};

// OK when every override names an MoE layer, validates, and differs from
// info.layer only in routing options (score function, normalisation and
// scale, groups, biases on choice or logits, norm_min, hash_vocab), the
// activation (act and its alpha, limit, beta and lambda, shared_act and its
// limit), top_k, inter and shared_inter; INVALID_ARGUMENT naming the layer
// and the keys that differ otherwise.
absl::Status CheckLayerOverrides(const ModelInfo& info);

// The first MoE layer whose top_k, inter or shared_inter differs from the
// model's, if any: a backend that sizes its buffers and kernels once per
// model (CUDA) refuses such a model by it.
std::optional<int64_t> FirstLayerOfOwnShape(const ModelInfo& info);

// `c` with the activation options of `of`.
MoeLayerConfig WithActivationOf(MoeLayerConfig c, const MoeLayerConfig& of);

// Sets every MoE layer's config from `config_of(layer)`: the first MoE
// layer's becomes info->layer, each other layer whose config differs from
// it an override (the overrides before are replaced). The one way a family
// rule or a per-layer list gives layers their own configs.
void SetLayerConfigs(ModelInfo* info,
                     const std::function<MoeLayerConfig(int64_t)>& config_of);

// `c` with every option a layer may set for itself (CheckLayerOverrides)
// taken from `of`.
MoeLayerConfig WithPerLayerOptionsOf(MoeLayerConfig c,
                                     const MoeLayerConfig& of);

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const ModelInfo& info() const = 0;
  // The tensor of `role` (of `expert` for routed roles) in MoE layer `layer`.
  // NOT_FOUND for a missing tensor or a layer that is not an MoE layer.
  // Shapes and dtypes are checked by the one consumer, LoadLayerWeights.
  virtual absl::StatusOr<WeightTensor> Get(int64_t layer, WeightRole role,
                                           int64_t expert) const = 0;
};

// Checks a tensor against ExpectedShape and that its dtype is a float type
// (an integer type for kTid2Eid).
absl::Status CheckWeightTensor(const WeightTensor& t,
                               const MoeLayerConfig& config, WeightRole role);

}  // namespace moe

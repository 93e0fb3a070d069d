// Writes a golden case as a Hugging Face checkpoint of a given family:
// config.json, weights split over several safetensors shards with an index,
// and the unrelated tensors a real checkpoint has (embeddings, attention,
// norms, dense MLP layers, DeepSeek-V3's MTP layer), which must be ignored.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/hf_config.h"
#include "tests/testutil/golden_case.h"

namespace moe::testing {

struct HfWriteOptions {
  HfFamily family = HfFamily::kMixtral;
  int64_t layer = 1;  // the MoE layer that holds the case
  int shards = 3;     // files; 1 with write_index=false gives model.safetensors
  bool write_index = true;
  DType storage = DType::kF32;  // experts and shared expert: F32, BF16, F16
  // The router (gate, expert bias). A bf16 gate would change the routing
  // itself, which the golden bf16 tolerance does not cover.
  DType router_storage = DType::kF32;
  uint64_t seed = 7;  // filler weights of the other layers
  // Routed experts one tensor per expert, or packed as transformers v5
  // saves them (qwen3_5_moe is always written packed), or Mistral's own
  // layout (kConsolidated: WriteMistralCheckpoint).
  HfExpertLayout layout = HfExpertLayout::kPerExpert;
  // gpt_oss / deepseek_v4 as released: routed experts MXFP4 (gpt-oss
  // *_blocks/*_scales, V4 I8 + F8_E8M0 .scale), V4's shared expert F8_E4M3
  // with power-of-two F8_E8M0 128x128 block scales, routers in the
  // release's dtypes (storage options ignored). The golden layer's weights
  // must round-trip exactly (the writer refuses otherwise).
  bool released = false;
  // Routed experts as an NVIDIA ModelOpt NVFP4 export (per-expert families
  // only): `weight` U8 code pairs, `weight_scale` F8_E4M3 per 16 inputs,
  // `weight_scale_2` F32 and `input_scale` F32 scalars, with a power-of-two
  // global scale near amax / (6 * 448); quantization_config modelopt NVFP4
  // with the router and shared expert in its ignore list. The golden
  // layer's routed expert weights must round-trip exactly (the writer
  // refuses otherwise).
  bool nvfp4_experts = false;
  // DeepSeek-V4 with hash-routed and top-k layers: layers L < hash_layers
  // are hash-routed with hash_case's config (num_hash_layers), layer
  // hash_layers - 1 holding its weights and the others filler; the case
  // written must then be top-k and o.layer >= hash_layers.
  const GoldenCase* hash_case = nullptr;
  int64_t hash_layers = 0;
  // ERNIE-4.5-VL: the case layer o.layer's vision experts hold (its gate,
  // correction bias and experts; their width ErnieVlVisionInter of the
  // text case's, the shared experts the text case's), else filler.
  const GoldenCase* vision_case = nullptr;
};

// The vision experts' width in an ERNIE-4.5-VL checkpoint written for a
// text config `k`.
int64_t ErnieVlVisionInter(const MoeLayerConfig& k);

// config.json text of `family` for a model of num_layers whose MoE layers
// (other than dense ones) have config `c`.
std::string HfConfigJson(const MoeLayerConfig& c, HfFamily family,
                         int64_t num_layers);

// The families whose config.json expresses `c` exactly (parsed back and
// compared).
std::vector<HfFamily> FamiliesFor(const MoeLayerConfig& c);

// With o.layout kConsolidated: WriteMistralCheckpoint.
absl::Status WriteHfCheckpoint(const GoldenCase& c, const HfWriteOptions& o,
                               const std::string& dir);

// Mistral's own layout of o.family (mixtral, or deepseek_v3 as
// Mistral-Large-3): params.json and consolidated.safetensors (one shard
// without an index) or consolidated-0000N-of-0000M.safetensors with
// consolidated.safetensors.index.json (o.write_index), no config.json.
// Refused when that params.json does not express the case exactly.
absl::Status WriteMistralCheckpoint(const GoldenCase& c,
                                    const HfWriteOptions& o,
                                    const std::string& dir);

// Sets params.json key `key` ("moe.<key>" below moe) to the JSON value
// `value_json`, or removes it when `value_json` is empty.
absl::Status SetMistralParamsKey(const std::string& dir, const std::string& key,
                                 const std::string& value_json);

// DeepSeek-V4 as released, 4 layers: 0-1 hash-routed (deepseek_v4_hash's
// weights at 1), 2-3 top-k (deepseek_v4_like's at 2), written into `dir`
// (unquantised, or in the release's formats).
struct DeepseekV4Mixed {
  GoldenCase hash;  // served at layer 1, with its token ids
  GoldenCase topk;  // served at layer 2
};
absl::StatusOr<DeepseekV4Mixed> WriteDeepseekV4Mixed(const std::string& dir,
                                                     bool released);

// Rewrites the shard that holds tensor `name` (found through the index) with
// that tensor replaced by zeros of `shape` (F32), or dropped from the shard
// and the index when `shape` is empty: for bad-checkpoint tests.
absl::Status ReplaceHfTensor(const std::string& dir, const std::string& name,
                             const std::vector<int64_t>& shape);

// As ReplaceHfTensor, with `bytes` (of `dtype`, `shape`) as the new tensor.
absl::Status ReplaceHfTensorBytes(const std::string& dir,
                                  const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape,
                                  const std::vector<uint8_t>& bytes);

// Sets top-level config.json key `key` to the JSON value `value_json`.
absl::Status SetHfConfigKey(const std::string& dir, const std::string& key,
                            const std::string& value_json);

// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& prefix);

// `c` written as a checkpoint (options `o`, in the last family that
// expresses it exactly) into a fresh directory named from `prefix`; that
// directory.
absl::StatusOr<std::string> WriteCaseCheckpoint(const GoldenCase& c,
                                                const std::string& prefix,
                                                HfWriteOptions o = {});

}  // namespace moe::testing

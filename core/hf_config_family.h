// A Hugging Face MoE family as data: its model_type and classes, where its
// tensors live, and the description of its MoE layer (which config keys give
// the counts and widths, the gate's math pieces, the activation, the rule
// for which layers are MoE) that the one config interpreter
// (hf_config_description.cc) reads. A family whose math the engine has is a
// table entry in hf_config_families.cc, not code.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/hf_config.h"
#include "core/hf_config_reader.h"
#include "core/model_source.h"

namespace moe {

// An integer key and the value a config without it has; without a
// fallback the key is required.
struct IntKey {
  const char* key = nullptr;
  std::optional<int64_t> fallback = std::nullopt;
};
// A number key and its default; a family with no key for the option keeps
// MoeLayerConfig's default.
struct NumberKey {
  const char* key = nullptr;
  double fallback = 0.0;
};
// A boolean key and its default; with no key, `fallback` is the family's
// fixed value.
struct BoolKey {
  const char* key = nullptr;
  bool fallback = false;
};

// A string key that may only name the listed values, `fallback` when the
// config omits it; anything else is refused, naming the key and the values
// it may have.
struct StringKey {
  const char* key = nullptr;
  const char* fallback = nullptr;
  std::vector<const char*> values = {};
};
// A key naming the score function: the same, each value with its ScoreFunc.
struct ScoreName {
  const char* name;
  ScoreFunc func;
};
struct ScoreKey {
  const char* key = nullptr;
  const char* fallback = nullptr;
  // A static array: a vector of pairs here makes GCC 12 warn
  // (maybe-uninitialized) on the table's initializer.
  absl::Span<const ScoreName> values = {};
};
// A key naming how the layer's output is scaled: each value with its
// output_scale (Cohere2-MoE's "sum" 1, "average" 0.5).
struct ScaleName {
  const char* name;
  float scale;
};
struct ScaleKey {
  const char* key = nullptr;
  const char* fallback = nullptr;
  absl::Span<const ScaleName> values = {};
};

// Where the shared expert's width comes from.
enum class SharedExpertRule {
  kNone,
  // `key` shared experts of the routed width, run as one of their summed
  // width (DeepSeek's n_shared_experts).
  kCountTimesInter,
  // `key` gives its width (Qwen's shared_expert_intermediate_size).
  kWidthKey,
  // One, always, of the routed width (Llama 4).
  kSameAsRouted,
};

struct SharedExpertDescription {
  SharedExpertRule rule = SharedExpertRule::kNone;
  IntKey key = {};
  // kCountTimesInter: the key of each shared expert's width when it is not
  // the routed one (Ling-3.0's moe_shared_expert_intermediate_size); a
  // config without that key gives the routed width.
  IntKey width = {};
  // sigmoid(x g^T) scales it whenever there is one (Qwen).
  bool gated = false;
  // A width below 1 is refused: the family's block always has one.
  bool required = false;
};

// How the renormalisation and the routed scaling factor combine.
enum class RenormAndScale {
  // DeepseekV3MoEGate and the later gates: optional renorm, then always the
  // scale.
  kRenormThenScale,
  // DeepseekV2MoEGate: renorm *or* scale, never both.
  kRenormOrScale,
};

// Which group-limited routing, if any, the gate does.
enum class GroupRule {
  kNone,
  // n_groups / topk_groups from the two keys, groups scored by their top-2
  // sum (Nemotron 3).
  kFromKeys,
  // As kFromKeys, but only a limit that drops a group is one: groups only
  // when the count exceeds max(1, kept) (Kimi K3).
  kOnlyWhenLimiting,
  // DeepSeek's topk_method (`method`): greedy (no groups),
  // group_limited_greedy (groups scored by their max) or noaux_tc (top-2
  // sum and the correction bias for choosing).
  kDeepseekTopkMethod,
};

struct GroupDescription {
  GroupRule rule = GroupRule::kNone;
  IntKey count = {"n_group", 1};
  IntKey kept = {"topk_group", 1};
  // kDeepseekTopkMethod: the key and its default.
  const char* method_key = "topk_method";
  const char* method_fallback = nullptr;
};

struct ActivationDescription {
  Activation act = Activation::kSilu;
  // Non-gated experts have no W1: act(x W3^T) W2^T.
  bool gated = true;
  // The key naming the activation and the one value the family's experts
  // have (also its default); none when the config does not name it.
  const char* key = nullptr;
  const char* name = nullptr;
  std::optional<float> alpha = std::nullopt;  // fixed by the model code
  NumberKey limit = {};                       // act_limit
  NumberKey beta = {};                        // SiTU's beta
  NumberKey linear_beta = {};                 // SiTU's lambda
};

// Which decoder layers are MoE; each rule reads its own keys
// (hf_config_layers.cc).
enum class MoeLayerRule {
  kAll,
  // decoder_sparse_step and mlp_only_layers (Qwen2/3-MoE).
  kQwenSparseStep,
  // first_k_dense_replace and the stride moe_layer_freq (DeepSeek).
  kDeepseekFirstDenseAndFreq,
  // first_k_dense_replace only (GLM-4.5).
  kGlmFirstDense,
  // moe_layers, else interleave_moe_layer_step (Llama 4).
  kLlama4List,
  // moe_layer_interval from moe_layer_start_index to moe_layer_end_index
  // (ERNIE 4.5).
  kErnieInterval,
  // hybrid_override_pattern's Es or layers_block_type's "moe"s (Nemotron 3).
  kNemotronPattern,
  // Every moe_layer_frequency-th layer, (L + 1) % frequency == 0 (Arctic).
  kArcticFrequency,
  // L % expert_layer_period == expert_layer_offset, when num_experts > 1
  // (Jamba).
  kJambaPeriod,
  // Every layer from num_dense_layers on (AFMoE, LFM2-MoE).
  kNumDenseLayers,
  // moe_layers_enum ("1,2,..."), else layers 1..num_hidden_layers-1 (Step-3
  // and Step-3.5).
  kStepLayersEnum,
};

// A family's own rule that is no data: it reads `r` and sets or refuses
// what no other family does.
using FamilyRule = absl::Status (*)(const ConfigReader& r, ModelInfo* info);

// The MoE layer of a family: what its config keys mean for MoeLayerConfig.
// The interpreter reads them in this order: refusal, counts and widths,
// shared expert, activation, latent options, score function, formats,
// weights, groups, norms, fixed pieces, MoE layers, then `finish`.
struct MoeDescription {
  // A config the engine cannot serve though its keys parse (Gemma 4 without
  // its MoE block), refused before anything is read.
  FamilyRule refuse = nullptr;
  IntKey experts = {};
  IntKey inter = {};  // the routed expert width
  SharedExpertDescription shared = {};
  // Under LatentMoE (latent > 0): the keys that turn on the latent
  // projections' biases and the latent sum's RMSNorm.
  BoolKey latent_bias = {};
  BoolKey latent_norm = {};
  // The score function: fixed, unless `score_key` names it.
  ScoreFunc score = ScoreFunc::kSoftmax;
  ScoreKey score_key = {};
  // Keys naming a storage format the loader must know, checked here so that
  // a checkpoint in another one is refused before its tensors are read.
  std::vector<StringKey> formats = {};
  // Renormalise the top-k weights: fixed when `route_norm.key` is null.
  BoolKey route_norm = {};
  // Renorm of a single weight is no renorm (DeepSeek: norm && k > 1).
  bool route_norm_needs_two = false;
  NumberKey route_scale = {};
  RenormAndScale renorm_and_scale = RenormAndScale::kRenormThenScale;
  NumberKey norm_min = {};
  GroupDescription groups = {};
  ActivationDescription activation = {};
  NumberKey norm_eps = {};  // the block's RMSNorms
  // Fixed math pieces (moe_config.h).
  bool use_bias = false;
  bool router_bias = false;
  bool expert_bias = false;
  bool score_before_experts = false;
  bool router_prenorm = false;
  bool per_expert_scale = false;
  bool branch_norms = false;
  MoeLayerRule layers = MoeLayerRule::kAll;
  // A rule on the finished config (DeepSeek-V4's hash layers).
  FamilyRule finish = nullptr;
  // A key that turns the correction bias for choosing on (LFM2-MoE's
  // use_expert_bias), beside the fixed `use_bias` and DeepSeek's noaux_tc.
  BoolKey correction_bias = {};
  // 2026d router-side pieces. sparsemixer's epsilon (score kSparsemixer).
  NumberKey jitter_eps = {};
  // The zero experts' count and the key saying what they compute, which
  // may only name the one kind the engine has ("identity": w * x).
  IntKey zero_experts = {};
  StringKey zero_expert_type = {};
  // The router-logit soft-cap c (Grok-1's router_logit_softcapping).
  NumberKey router_softcap = {};
  // The output scale (fixed at 1 without a key) and a fixed output bias.
  ScaleKey output_scale = {};
  bool output_bias = false;
};

struct FamilyEntry {
  const char* model_type = nullptr;
  HfFamily family = HfFamily::kMixtral;
  // The `architectures` a checkpoint of the family may name.
  std::vector<const char*> architectures;
  // A multimodal config keeps the language model's keys in text_config.
  bool text_config = false;
  // Or under this path of nested objects (Qwen3-Omni's thinker_config,
  // text_config), read in place of text_config.
  std::vector<const char*> sub_config = {};
  // The model_types the language model's own config (text_config, or the
  // sub_config path) may name, where a wrapper also carries dense language
  // models (Intern-S1's qwen3 or qwen3_moe); a sub-config naming another is
  // refused naming its model_type key. Any (or none) when empty.
  std::vector<const char*> sub_model_types = {};
  // The family whose MoE description and tensor names this one shares: a
  // family whose MoE math and names exist already is described by
  // difference. Itself when unset.
  std::optional<HfFamily> like = std::nullopt;
  // Config keys that, when given as a per-layer list of num_hidden_layers
  // entries ("sparse" / "dense", or 1 / 0), say which layers are MoE in
  // place of the `like` family's own rule; the first one present wins.
  std::vector<const char*> moe_layer_lists = {};
  // Keys the `like` family's description reads but this family's config
  // does not have: they are read as absent (the base family's default) even
  // when a config carries them.
  std::vector<const char*> absent_keys = {};
  // Decoder layer L's tensor prefix, {L} standing for L; the `like`
  // family's when unset, "model.layers.{L}." when neither sets one.
  const char* layer_prefix = nullptr;
  // The config key that gives the LatentMoE width, where the family has one:
  // a checkpoint whose latent projections are of another width is refused
  // naming it.
  const char* latent_key = nullptr;
  // The keys that may give k, the first present winning; a config with none
  // is refused naming the last.
  std::vector<const char*> top_k_keys = {"num_experts_per_tok"};
  // A sub-object whose keys are read beside the config's own (DBRX keeps
  // its MoE keys in ffn_config); a config without it is refused naming it.
  const char* moe_config = nullptr;
  // Keys the family spells its own way, {common name, the family's}: the
  // family's key is read where the common one is (DBRX's d_model for
  // hidden_size).
  std::vector<std::pair<const char*, const char*>> renamed_keys = {};
  // Keys a config may give per layer (a list of num_hidden_layers values,
  // Hunyuan's moe_topk): each MoE layer's config is read with its own
  // entries, and a layer whose config then differs from the first MoE
  // layer's gets it as an override (CheckLayerOverrides says what a layer
  // may set for itself; a list giving layers different expert counts is
  // refused).
  std::vector<const char*> layer_lists = {};
  // Keys whose value is a [text, vision] pair (ERNIE-4.5-VL's
  // moe_num_experts, moe_intermediate_size, moe_layer_start_index,
  // moe_layer_end_index): the config is read once with the first entries
  // (the text experts, the model's MoE layers) and once with the second
  // (the vision experts), and MoE layer L's vision experts are served as
  // MoE layer num_layers + L of their own config (ModelInfo::vision_layers),
  // named as the release names them (HfCheckpoint). A scalar holds for both.
  std::vector<const char*> modality_lists = {};
  // The key giving the decoder layer count (LongCat-Flash's num_layers,
  // whose num_hidden_layers counts its two sublayers per layer).
  const char* num_layers_key = "num_hidden_layers";
  // The MoE layer's keys and math; empty for a family `like` another.
  MoeDescription moe = {};
  // The family file this family was read from (family_file.h); null for a
  // built-in family.
  const char* source_file = nullptr;
};

// Every family: the built-in ones in HfFamily order, then those family
// files added. A deque, so that adding one moves none of the others.
const std::deque<FamilyEntry>& FamilyTable();
// The entry of `family` (the first entry for an unknown value).
const FamilyEntry& EntryOf(HfFamily family);
// Adds a family read from a file: `entry.family` is set to a fresh value
// past the built-in ones, which is returned. Only while one thread starts
// up, before any checkpoint is opened: the table is read without locks.
HfFamily AddFamilyEntry(FamilyEntry entry);

}  // namespace moe

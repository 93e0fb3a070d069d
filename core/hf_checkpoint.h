// A Hugging Face checkpoint directory (config.json + *.safetensors, sharded
// through model.safetensors.index.json or not), or Mistral's own layout
// (params.json + consolidated*.safetensors, mistral_params.h), as a
// ModelSource. Files are
// opened lazily and memory-mapped, so a worker touches only its experts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/hf_config.h"
#include "core/model_source.h"
#include "core/safetensors.h"

namespace moe {

class HfCheckpoint : public ModelSource {
 public:
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> Open(
      const std::string& dir);

  const ModelInfo& info() const override { return spec_.info; }
  HfFamily family() const { return spec_.family; }
  absl::StatusOr<WeightTensor> Get(int64_t layer, WeightRole role,
                                   int64_t expert) const override;

 private:
  HfCheckpoint() = default;
  // `missing` with the family file field that named the tensor, for a
  // family read from a file; as it is otherwise.
  absl::Status NamedByFamilyFile(const absl::Status& missing,
                                 WeightRole role) const;
  absl::StatusOr<const SafetensorsFile*> OpenFile(
      const std::string& file) const;
  absl::StatusOr<TensorRef> Find(const std::string& tensor) const;
  // Fills weight_map_ from the index `index_name` when there is one, else
  // from the headers of the *.safetensors files named `shard_prefix`*.
  absl::Status ReadWeightMap(const std::string& index_name,
                             const std::string& shard_prefix);
  // Sets spec_.layout from the first MoE layer's expert tensors: one per
  // expert, or transformers v5's packed ones. Neither is refused, naming
  // both.
  absl::Status DetectExpertLayout();
  // The LatentMoE width the config gives must be the rows of each MoE
  // layer's H -> latent projection; a mismatch is refused naming the config
  // key and both widths, not left to surface as a routed expert's shape.
  absl::Status CheckLatentWidth() const;
  // One expert's [out, in] weight out of a fused tensor (Llama 4, gpt-oss)
  // or a packed one (transformers v5).
  absl::StatusOr<WeightTensor> SliceFused(const HfTensorLocation& loc,
                                          const TensorRef& ref) const;
  // Attaches an FP8 weight's block scales (kept FP8: the engine dequantises
  // or packs it as the weight dtype asks).
  absl::Status AttachBlockScales(const TensorRef& weight,
                                 const TensorRef& scale, WeightTensor* t) const;
  // ERNIE-4.5-VL's tensors of expert set `modality` (0 text, 1 vision): the
  // correction bias's row, the router [E, H] (stored [H, E] or [E, H]).
  absl::StatusOr<WeightTensor> ModalityTensor(const MoeLayerConfig& c,
                                              WeightRole role, int modality,
                                              WeightTensor t) const;

  // gpt-oss as released: one expert's role out of the fused MXFP4
  // `<name>_blocks` / `<name>_scales` (kept MXFP4, gate/up rows
  // de-interleaved).
  absl::StatusOr<WeightTensor> GptOssMxfp4(const HfTensorLocation& loc) const;
  // DeepSeek-V4 as released: an I8 fp4 weight (MXFP4) or an F8_E4M3 one,
  // each with its E8M0 `.scale`; `logical` is the role's [out, in].
  absl::StatusOr<WeightTensor> DeepseekV4Quantised(
      const std::vector<int64_t>& logical, const TensorRef& ref,
      const std::string& scale_name, WeightTensor t) const;

  // Kimi K3 as released: `<stem>.weight_packed` U8 [out, in/2] with
  // `<stem>.weight_scale` E8M0 [out, in/32] (compressed-tensors
  // mxfp4-pack-quantized), kept MXFP4; `logical` is the role's [out, in].
  absl::StatusOr<WeightTensor> CompressedMxfp4(
      const std::vector<int64_t>& logical, const std::string& stem) const;
  // The stem of `name` ("<stem>.weight") when the checkpoint keeps that
  // linear as compressed-tensors code pairs (`<stem>.weight_packed`) in
  // place of `name`; nullopt otherwise. Every reader of a linear asks this
  // one rule, so a new quantised layout is taught in one place.
  std::optional<std::string> CompressedStem(const std::string& name) const;
  // OK when `bias` is absent or all zero; refuses a bias the engine has no
  // role for (Nemotron's expert and shared-expert biases), naming it.
  absl::Status NoUnservedBias(const std::string& bias) const;

  std::string dir_;
  HfModelSpec spec_;
  // Tensor name -> file name inside dir_.
  std::unordered_map<std::string, std::string> weight_map_;
  mutable absl::Mutex mu_;
  mutable std::unordered_map<std::string, std::unique_ptr<SafetensorsFile>>
      files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe

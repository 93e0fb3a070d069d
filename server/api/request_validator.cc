#include "server/api/request_validator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe {

absl::StatusOr<ValidForward> ValidateForward(const moe::v1::ForwardRequest& r,
                                             const ModelInfo& model,
                                             const ForwardLimits& limits) {
  if (!model.HasLayer(r.layer())) {
    const auto& ids = model.moe_layers;
    std::string listed =
        ids.size() <= 16
            ? absl::StrJoin(ids, ", ")
            : absl::StrCat(absl::StrJoin(ids.begin(), ids.begin() + 16, ", "),
                           ", ... (", ids.size(), " in all)");
    return absl::NotFoundError(absl::StrCat(
        "layer: ", r.layer(),
        " is not an MoE layer of this model; MoE layers: [", listed, "]"));
  }
  if (const auto owner = model.VisionOwner(r.layer()); owner.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer: ", r.layer(), " is layer ", *owner,
                     "'s vision experts; send layer ", *owner,
                     " with token_types (its rows of type 1 or 2 run here)"));
  }
  if (!r.has_hidden_states()) {
    return absl::InvalidArgumentError("hidden_states: required, x [N, H]");
  }
  const std::optional<DType> asked = FromWireDType(r.output_dtype());
  if (!asked && r.output_dtype() != moe::v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_dtype: expected F32, BF16, F16 or unset, got ",
                     static_cast<int>(r.output_dtype())));
  }
  // Size limits before decoding: a request over the limit costs no work.
  // The message names the flag, since the operator sets the limit there.
  const auto& t = r.hidden_states();
  if (t.shape_size() == 2 && t.shape(0) > limits.max_request_tokens) {
    return absl::ResourceExhaustedError(
        absl::StrCat("hidden_states.shape[0]: ", t.shape(0),
                     " tokens exceeds the limit of ", limits.max_request_tokens,
                     " per request (the router's --max-request-tokens)"));
  }
  auto x = CheckMatrix(t, "hidden_states", model.layer.hidden,
                       /*require_finite=*/true);
  if (!x.ok()) return x.status();
  const int64_t n = x->rows;
  const auto& ids = r.token_ids();
  // The routing is looked up per layer, because a model may mix hash-routed and
  // top-k layers (DeepSeek-V4).
  const MoeLayerConfig& c = model.LayerConfig(r.layer());
  if (c.hash_routed() && ids.empty() && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ids: required: layer ", r.layer(),
                     " is hash-routed (vocabulary ", c.hash_vocab,
                     "), so every row needs its token id (", n, " rows)"));
  }
  if (!ids.empty() && static_cast<int64_t>(ids.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_ids: ", ids.size(), " ids for ", n,
                     " rows of hidden_states; expected one per row"));
  }
  if (c.hash_routed()) {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= c.hash_vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token_ids[", i, "] (row ", i, "): ", ids[i], " is outside layer ",
            r.layer(), "'s vocabulary [0, ", c.hash_vocab, ")"));
      }
    }
  }
  const auto& types = r.token_types();
  const auto vision = model.vision_layers.find(r.layer());
  const bool modal = vision != model.vision_layers.end();
  if (modal && types.empty() && n > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_types: required: layer ", r.layer(),
        " has a text and a vision expert set (", model.family,
        "), so every row needs its type (0 text, 1 image, 2 video; ", n,
        " rows)"));
  }
  if (!types.empty() && static_cast<int64_t>(types.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_types: ", types.size(), " types for ", n,
                     " rows of hidden_states; expected one per row"));
  }
  bool any_vision = false;
  for (int64_t i = 0; i < static_cast<int64_t>(types.size()); ++i) {
    if (types[i] < 0 || types[i] > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_types[", i, "] (row ", i, "): ", types[i],
                       " is not 0 (text), 1 (image) or 2 (video)"));
    }
    any_vision = any_vision || types[i] != 0;
  }
  const bool split = modal && any_vision;
  if (split && (r.has_routing() || r.has_router_logits())) {
    return absl::InvalidArgumentError(absl::StrCat(
        r.has_routing() ? "routing" : "router_logits",
        ": taken only when every row is text; layer ", r.layer(),
        "'s rows of type 1 or 2 run its vision experts, which route by "
        "their own gate"));
  }
  auto caller = CheckCallerRouting(r, r.layer(), c, n);
  if (!caller.ok()) return caller.status();
  ValidForward v;
  v.caller = *caller;
  v.layer = r.layer();
  v.token_ids = absl::MakeConstSpan(ids.data(), ids.size());
  v.token_types = absl::MakeConstSpan(types.data(), types.size());
  v.vision_layer = split ? vision->second : -1;
  v.x = *x;
  // An unset output dtype means the answer goes back in the type the rows came
  // in.
  v.output_dtype = asked.value_or(x->dtype);
  return v;
}

}  // namespace moe

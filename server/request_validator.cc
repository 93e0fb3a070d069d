#include "server/request_validator.h"

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
  if (!r.has_hidden_states()) {
    return absl::InvalidArgumentError("hidden_states: required, x [N, H]");
  }
  const moe::v1::DType out = r.output_dtype() == moe::v1::DTYPE_UNSPECIFIED
                                 ? r.hidden_states().dtype()
                                 : r.output_dtype();
  if (WireDTypeSize(r.output_dtype()) == 0 &&
      r.output_dtype() != moe::v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_dtype: expected F32, BF16, F16 or unset, got ",
                     static_cast<int>(r.output_dtype())));
  }
  // Size limits before decoding: a request over the limit costs no work.
  const auto& t = r.hidden_states();
  if (t.shape_size() == 2 && t.shape(0) > limits.max_request_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hidden_states.shape[0]: ", t.shape(0), " tokens exceeds the limit of ",
        limits.max_request_tokens, " per request"));
  }
  auto x = CheckMatrix(t, "hidden_states", model.layer.hidden,
                       /*require_finite=*/true);
  if (!x.ok()) return x.status();
  ValidForward v;
  v.layer = r.layer();
  v.x = *x;
  v.output_dtype = out;
  return v;
}

}  // namespace moe

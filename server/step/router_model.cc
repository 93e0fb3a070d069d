#include "server/step/router_model.h"

#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/status_macros.h"

namespace moe {

absl::StatusOr<std::unique_ptr<RouterModel>> RouterModel::Load(
    const Options& o) {
  MOE_ASSIGN_OR_RETURN(auto source, OpenModel(o.location));
  auto m = std::unique_ptr<RouterModel>(new RouterModel());
  m->info_ = source->info();
  m->location_ = o.location;
  // "auto" becomes the checkpoint's own storage type here, once.
  MOE_ASSIGN_OR_RETURN(m->dtype_, ResolveWeightDType(o.dtype, *source));
  LoadOptions lo;
  lo.dtype = m->dtype_;
  lo.num_threads = o.threads;
  if (!o.all_experts) {
    lo.expert_begin = 0;
    lo.expert_end = 0;
  }
  MOE_ASSIGN_OR_RETURN(m->backend_, CreateExpertBackend(o.device, o.threads));
  MOE_RETURN_IF_ERROR(m->backend_->Load(*source, lo, o.max_tokens));
  spdlog::info(
      "model {} ({}) on {}: {} MoE layers, H={} I={} E={} k={} shared={}",
      m->info_.source, m->info_.family, m->device(), m->info_.moe_layers.size(),
      m->info_.layer.hidden, m->info_.layer.inter, m->info_.layer.num_experts,
      m->info_.layer.top_k, m->info_.layer.shared_inter);
  if (const auto hash = m->info_.HashLayers();
      !hash.empty() && !m->info_.layer_overrides.empty()) {
    // Each layer routes by its own config (LayerWeights::config).
    spdlog::info("hash-routed layers [{}] (need token_ids), top-k the rest",
                 absl::StrJoin(hash, ", "));
  }
  return m;
}

}  // namespace moe

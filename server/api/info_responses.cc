#include "server/api/info_responses.h"

#include "core/moe_config.h"
#include "core/process_memory.h"

namespace moe {

void FillModelInfo(const RouterModel& model, const GroupReadiness* readiness,
                   int64_t max_batch_tokens, int64_t max_request_tokens,
                   const std::string& device, moe::v1::ModelInfo* info) {
  const ModelInfo& m = model.info();
  info->set_family(m.family);
  info->set_source(m.source);
  info->set_hidden(m.layer.hidden);
  info->set_inter(m.layer.inter);
  info->set_experts(m.layer.num_experts);
  info->set_top_k(m.layer.top_k);
  info->set_shared_inter(m.layer.shared_inter);
  for (int64_t l : m.RequestLayers()) {
    info->add_moe_layers(static_cast<int32_t>(l));
  }
  for (const auto& [l, v] : m.vision_layers) {
    (*info->mutable_vision_layers())[static_cast<int32_t>(l)] =
        static_cast<int32_t>(v);
  }
  info->set_weight_dtype(std::string(WeightDTypeName(model.dtype())));
  info->set_expert_weight_bytes(PackedExpertBytes(m.layer, model.dtype()));
  info->set_layer_config_json(MoeLayerConfigToJson(m.layer));
  info->set_hash_vocab(m.MaxHashVocab());
  for (int64_t l : m.HashLayers()) {
    info->add_hash_layers(static_cast<int32_t>(l));
  }
  for (const auto& [l, c] : m.layer_overrides) {
    (*info->mutable_layer_config_overrides_json())[static_cast<int32_t>(l)] =
        MoeLayerConfigToJson(c);
  }
  info->set_max_batch_tokens(max_batch_tokens);
  info->set_max_request_tokens(max_request_tokens);
  info->set_device(device);
  const ProcessMemory mem = ReadProcessMemory();
  info->set_router_rss_bytes(mem.rss_bytes);
  info->set_router_peak_rss_bytes(mem.peak_rss_bytes);
  if (readiness != nullptr) {
    const GroupState st = readiness->state();
    info->set_num_workers(st.world_size);
    info->set_ready_workers(st.ready_workers);
    info->set_ready(st.ready);
    info->set_group_workers(st.group_size);
    info->set_degraded(st.degraded());
  } else {
    info->set_ready(true);
  }
}

void FillExpertStats(const LayerStats& l, moe::v1::ExpertStats* s) {
  s->set_layer(static_cast<int32_t>(l.layer));
  s->set_steps(l.steps);
  s->set_tokens(l.tokens);
  s->set_dropped_slots(l.dropped_slots);
  s->mutable_tokens_per_expert()->Assign(l.tokens_per_expert.begin(),
                                         l.tokens_per_expert.end());
  s->set_entropy(l.balance.entropy);
  s->set_normalized_entropy(l.balance.normalized_entropy);
  s->set_gini(l.balance.gini);
  s->set_max_over_mean(l.balance.max_over_mean);
  s->set_min_over_mean(l.balance.min_over_mean);
  s->mutable_rows_per_worker()->Assign(l.rows_per_worker.begin(),
                                       l.rows_per_worker.end());
  s->set_worker_max_over_mean(l.worker_max_over_mean);
  for (const std::vector<int32_t>& w : l.placement) {
    s->add_placement()->mutable_experts()->Assign(w.begin(), w.end());
  }
  s->mutable_replicas_per_expert()->Assign(l.replicas_per_expert.begin(),
                                           l.replicas_per_expert.end());
}

}  // namespace moe

// What a backend holds of one MoE layer, as plain values, read the same way
// from every backend's weights (ShardOf), and the one check of it against
// what a caller needs (ExpertBackend::CheckLayer): written once for every
// backend, so that they describe and refuse the same shards alike.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace moe {

struct LayerShard {
  int64_t num_experts = 0;         // the layer's routed experts (config)
  bool has_shared_expert = false;  // the layer has one (config)
  bool gate_loaded = false;
  bool shared_loaded = false;
  // Routed experts [expert_begin, expert_end) and the local slots holding
  // them (a redundant placement's slot list may differ from the range).
  int64_t expert_begin = 0, expert_end = 0;
  int64_t local_experts = 0;
};

// The shard of a backend's layer weights `w` (LayerWeights on the host,
// CudaLayerWeights on a device): the fields both share. `local_experts`
// counts the slots held, which a redundant placement's slot list makes
// differ from the range.
template <typename Weights>
LayerShard ShardOf(const Weights& w) {
  LayerShard s;
  s.num_experts = w.config.num_experts;
  s.has_shared_expert = w.config.has_shared();
  s.gate_loaded = w.has_gate;
  s.shared_loaded = w.has_shared;
  s.expert_begin = w.expert_begin;
  s.expert_end = w.expert_end;
  s.local_experts = static_cast<int64_t>(w.experts.size());
  return s;
}

// FAILED_PRECONDITION naming the layer and what is missing when `shard`
// lacks the router's gate (`need_gate`), the layer's shared expert
// (`need_shared`, where the layer has one) or any routed expert
// (`need_all_experts`: the single-process layer computes every expert).
absl::Status CheckLayerShard(int64_t layer, const LayerShard& shard,
                             bool need_gate, bool need_shared,
                             bool need_all_experts);

}  // namespace moe

#include "server/router_part_options.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "proto/model_spec.h"

namespace moe {

RouterModel::Options ModelOptionsFor(const RouterOptions& o) {
  RouterModel::Options mo;
  mo.location = o.location;
  mo.dtype = o.dtype;
  mo.all_experts = o.num_workers == 0;
  mo.threads = o.threads;
  mo.device = o.device;
  mo.max_tokens = o.max_batch_tokens;
  return mo;
}

RouterServers::Options ServersOptionsFor(const RouterOptions& o) {
  RouterServers::Options s;
  s.listen = o.listen;
  s.worker_listen = o.worker_listen;
  s.worker_port_file = o.worker_port_file;
  s.health_listen = o.health_listen;
  s.health_port_file = o.health_port_file;
  s.max_concurrent_streams = o.max_concurrent_streams;
  return s;
}

int MessageLimitFor(const RouterOptions& o, const ModelInfo& info) {
  int64_t max_bytes = o.max_message_bytes;
  if (max_bytes <= 0) {
    max_bytes =
        o.max_batch_tokens *
            (info.layer.hidden * 4 +
             std::max<int64_t>(info.MaxTopK(), info.layer.num_experts) * 8) +
        (16 << 20);
  }
  return static_cast<int>(std::min<int64_t>(max_bytes, INT32_MAX));
}

int RequestLimitFor(const RouterOptions& o, const ModelInfo& info) {
  const int64_t limit = MessageLimitFor(o, info);
  if (o.max_message_bytes > 0) return static_cast<int>(limit);
  return static_cast<int>(
      std::min<int64_t>(limit * kOversizedRequestFactor, INT32_MAX));
}

WorkerPoolOptions PoolOptionsFor(
    const RouterOptions& o, int64_t num_experts,
    std::shared_ptr<const ExpertPlacement> placement) {
  WorkerPoolOptions po;
  po.world_size = o.num_workers;
  po.placement = std::move(placement);
  po.num_experts = num_experts;
  po.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_interval_ms);
  po.heartbeat_misses = o.heartbeat_misses;
  po.regroup_after = std::chrono::milliseconds(o.regroup_after_ms);
  po.hold_while_regrouping =
      std::chrono::milliseconds(o.hold_while_regrouping_ms);
  return po;
}

WorkerControlOptions ControlOptionsFor(const RouterOptions& o,
                                       WeightDType resolved,
                                       const WorkerAuth* auth) {
  WorkerControlOptions wo;
  wo.model = ModelSpecFor(o.location, WeightDTypeName(resolved));
  wo.collective_timeout = o.step_timeout;
  // One connect attempt: long enough for a busy host, short next to a
  // step timeout, so that a peer stopped for a moment costs one retry.
  wo.connect_timeout =
      std::min(o.step_timeout, std::chrono::milliseconds(3000));
  wo.max_batch_tokens = o.max_batch_tokens;
  wo.auth = auth;
  return wo;
}

Batcher::Options BatcherOptionsFor(const RouterOptions& o) {
  Batcher::Options bo;
  bo.max_batch_tokens = o.max_batch_tokens;
  bo.window = o.batch_window;
  bo.step_timeout = o.step_timeout;
  bo.max_queue_tokens = o.max_queue_tokens;
  bo.bf16_steps = o.bf16_results;
  return bo;
}

}  // namespace moe

// A worker's Prometheus metrics: steps by outcome, stage times, rows
// computed, and its place in the group.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/stage_times.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moe {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);
  // One step's outcome and, when it succeeded, its stage times (decode,
  // gather, dispatch wait, experts, combine wait, sum, and the whole step)
  // and rows computed.
  void Step(absl::StatusCode code, const WorkerStageTimes& times,
            int64_t expert_rows);
  void Group(int rank, int world_size, uint64_t generation, bool ready);

 private:
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Histogram>& stages_;
  prometheus::Histogram& rows_;
  prometheus::Gauge& rank_;
  prometheus::Gauge& world_;
  prometheus::Gauge& generation_;
  prometheus::Gauge& ready_;
};

}  // namespace moe

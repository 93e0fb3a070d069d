// A worker's Prometheus metrics: steps by outcome, stage times, rows
// computed, and its place in the group.
#pragma once

#include <cstdint>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moe {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);
  void Step(int code, double dispatch_s, double experts_s, double combine_s,
            int64_t rows);
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

// Prometheus metric families registered by name and help text (the One*
// forms for a metric with a single, unlabelled series), and the bucket
// boundaries the router's histograms share.
#pragma once

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moe {

// Bucket boundaries shared by router and worker: seconds from 50 us to
// 30 s, and powers of two for counts.
prometheus::Histogram::BucketBoundaries LatencyBuckets();
prometheus::Histogram::BucketBoundaries CountBuckets(double max);

prometheus::Family<prometheus::Counter>& Counters(prometheus::Registry& r,
                                                  const char* name,
                                                  const char* help);
prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& r,
                                              const char* name,
                                              const char* help);
prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& r,
                                                      const char* name,
                                                      const char* help);
prometheus::Gauge& OneGauge(prometheus::Registry& r, const char* name,
                            const char* help);
prometheus::Histogram& OneHistogram(
    prometheus::Registry& r, const char* name, const char* help,
    const prometheus::Histogram::BucketBoundaries& buckets);

}  // namespace moe

#include "server/step/metric_families.h"

namespace moe {
namespace {

template <typename Builder>
auto& Registered(Builder b, prometheus::Registry& r, const char* name,
                 const char* help) {
  return b.Name(name).Help(help).Register(r);
}

}  // namespace

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

prometheus::Histogram::BucketBoundaries CountBuckets(double max) {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1; v <= max; v *= 2) b.push_back(v);
  return b;
}

prometheus::Family<prometheus::Counter>& Counters(prometheus::Registry& r,
                                                  const char* name,
                                                  const char* help) {
  return Registered(prometheus::BuildCounter(), r, name, help);
}

prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& r,
                                              const char* name,
                                              const char* help) {
  return Registered(prometheus::BuildGauge(), r, name, help);
}

prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& r,
                                                      const char* name,
                                                      const char* help) {
  return Registered(prometheus::BuildHistogram(), r, name, help);
}

prometheus::Gauge& OneGauge(prometheus::Registry& r, const char* name,
                            const char* help) {
  return Gauges(r, name, help).Add({});
}

prometheus::Histogram& OneHistogram(
    prometheus::Registry& r, const char* name, const char* help,
    const prometheus::Histogram::BucketBoundaries& buckets) {
  return Histograms(r, name, help).Add({}, buckets);
}

}  // namespace moe

// Reading Prometheus metrics in tests: a registry as the text /metrics
// serves, and one sample's value out of such text.
#pragma once

#include <string>

#include "prometheus/registry.h"

namespace moe::testing {

// What /metrics would serve of `registry`.
std::string MetricsText(prometheus::Registry& registry);

// The value of the first sample line that starts with `series` (a metric
// name with its labels, e.g. moe_requests_total{code="OK",method="Forward"}),
// or -1 when there is none.
double MetricValue(const std::string& text, const std::string& series);

}  // namespace moe::testing

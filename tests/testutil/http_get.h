// A minimal HTTP/1.0 GET over loopback, for scraping /metrics in tests.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moe::testing {

// The body of GET http://127.0.0.1:port/path, or an error.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// The value of the first sample line that starts with `series` (a metric
// name with its labels, e.g. moe_requests_total{code="OK",method="Forward"}),
// or -1 when there is none.
double MetricValue(const std::string& text, const std::string& series);

}  // namespace moe::testing

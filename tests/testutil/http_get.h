// A minimal HTTP/1.0 GET over loopback, for scraping /metrics in tests.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tests/testutil/metric_text.h"

namespace moe::testing {

// The body of GET http://127.0.0.1:port/path, or an error.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace moe::testing

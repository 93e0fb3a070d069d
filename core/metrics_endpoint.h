// The Prometheus /metrics endpoint of a process (--metrics-listen).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace moe {

// Serves `registry`, the process_* metrics and moe_build_info (labelled
// `component`: core/process_metrics.h) on `listen` and writes the bound port
// to `port_file` (when given); null when `listen` is empty. UNAVAILABLE
// naming the flag, the address and the cause when it cannot listen (a port
// in use is never shared).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const std::string& listen, const std::string& port_file,
    const std::shared_ptr<prometheus::Registry>& registry,
    const char* component);

}  // namespace moe

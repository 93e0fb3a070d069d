// Prometheus metrics every service process exports beside its own: the
// standard process_* family (CPU seconds, resident and virtual memory, open
// file descriptors, start time) read from /proc at each scrape, and
// moe_build_info{version, commit, cuda} = 1, so a dashboard can tell which
// build answers and alert rules can see a restart.
#pragma once

#include <memory>

#include "prometheus/collectable.h"

namespace moe {

// A collectable for Exposer::RegisterCollectable; `component` ("router",
// "worker") labels moe_build_info.
std::shared_ptr<prometheus::Collectable> MakeProcessMetrics(
    const char* component);

}  // namespace moe

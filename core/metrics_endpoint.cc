#include "core/metrics_endpoint.h"

#include <exception>
#include <vector>

#include "core/logging.h"
#include "core/net_address.h"
#include "core/port_file.h"
#include "core/process_metrics.h"
#include "core/status_macros.h"

namespace moe {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const std::string& listen, const std::string& port_file,
    const std::shared_ptr<prometheus::Registry>& registry,
    const char* component) {
  if (listen.empty()) return nullptr;
  std::unique_ptr<prometheus::Exposer> exposer;
  // civetweb binds with SO_REUSEADDR and not SO_REUSEPORT: a port another
  // process listens on fails here, and the probe names why (civetweb's own
  // words only say that binding may have failed).
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return ListenFailure("--metrics-listen", listen, e.what());
  }
  exposer->RegisterCollectable(registry);
  // The exposer keeps weak pointers: this one lives as long as the exposer.
  static std::vector<std::shared_ptr<prometheus::Collectable>> process_metrics;
  process_metrics.push_back(MakeProcessMetrics(component));
  exposer->RegisterCollectable(process_metrics.back());
  const int port = exposer->GetListeningPorts().at(0);
  MOE_RETURN_IF_ERROR(WritePortFile(port_file, port));
  spdlog::info("metrics on port {} (/metrics)", port);
  return exposer;
}

}  // namespace moe

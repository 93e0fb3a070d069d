#include "server/listening_line.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

std::string ListeningLine(const RouterOptions& o, const ServingPorts& ports,
                          bool tokens_required) {
  return fmt::format(
      "router listening on port {}{} ({} workers{}, max batch {} tokens, "
      "window "
      "{} us, {} steps in flight{}{}{})",
      ports.api, o.tls.cert.empty() ? "" : " (TLS)", o.num_workers,
      ports.workers ? absl::StrCat(" on port ", ports.workers,
                                   o.tls.ca.empty() ? "" : " (mutual TLS)")
                    : "",
      o.max_batch_tokens, o.batch_window.count(), o.max_inflight_steps,
      // Names how rows and results travel, when not the default.
      o.dispatch_dtype == "auto"
          ? ""
          : absl::StrCat(", --dispatch-dtype ", o.dispatch_dtype),
      ports.health ? absl::StrCat(", health on port ", ports.health) : "",
      tokens_required ? ", bearer tokens required" : "");
}

}  // namespace moe

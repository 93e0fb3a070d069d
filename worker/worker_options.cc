#include "worker/worker_options.h"

#include "absl/strings/str_cat.h"
#include "core/cli_args.h"
#include "core/device_spec.h"
#include "core/status_macros.h"

namespace moe {
namespace {

absl::Status CheckTls(const WorkerFlags& f) {
  // Both halves of the client key pair, or neither.
  if (f.tls.cert.empty() != f.tls.key.empty()) {
    return absl::InvalidArgumentError(f.tls.cert.empty()
                                          ? "--tls-key needs --tls-cert"
                                          : "--tls-cert needs --tls-key");
  }
  if (!f.tls_server_name.empty() && f.tls.empty()) {
    return absl::InvalidArgumentError(
        "--tls-server-name needs TLS (--tls-ca or --tls-cert and --tls-key)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerProcessOptions> WorkerProcessOptions::FromFlags(
    const WorkerFlags& f) {
  // Every gRPC target spelling has a colon: host:port, dns:///..., unix:...
  if (f.router.find(':') == std::string::npos) {
    return BadFlag("router", "HOST:PORT", absl::StrCat("'", f.router, "'"));
  }
  if (!ParseDeviceSpec(f.device).ok()) {
    return BadFlag("device", "cpu, cuda or cuda:N",
                   absl::StrCat("'", f.device, "'"));
  }
  if (f.threads < 0) {
    return BadFlag("threads", ">= 0 (0: all cores)", absl::StrCat(f.threads));
  }
  if (f.max_batch_tokens < 0) {
    return BadFlag("max-batch-tokens", ">= 0 (0: the router's)",
                   absl::StrCat(f.max_batch_tokens));
  }
  if (f.collective_host.empty()) {
    return BadFlag("collective-host", "an address", "''");
  }
  MOE_RETURN_IF_ERROR(CheckTls(f));
  WorkerProcessOptions o;
  static_cast<WorkerFlags&>(o) = f;
  MOE_ASSIGN_OR_RETURN(o.collective_kind, ParseCollective(f.collective));
  o.threads = ThreadsOrAllCores(f.threads);
  return o;
}

}  // namespace moe

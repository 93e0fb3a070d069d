#include "server/group/worker_admission.h"

#include "absl/strings/str_cat.h"
#include "core/net_address.h"

namespace moe {

absl::Status CheckCollectiveHost(const WorkerRegistration& info,
                                 const std::string& peer) {
  if (!IsLoopbackHost(info.collective_host) || IsLoopbackPeer(peer)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "worker (", info.host, " pid ", info.pid, ") refused: it connects from ",
      peer, " but advertises the loopback collective address ",
      info.collective_host,
      ", which the other workers cannot reach; start it "
      "without --collective-host (the address of the "
      "interface that reaches the router) or with "
      "--collective-host set to an address the other workers "
      "reach it on"));
}

absl::Status CheckDevice(const WorkerRegistration& info,
                         absl::Span<const RegisteredWorker> registered) {
  if (info.device_identity.empty()) return absl::OkStatus();
  for (const RegisteredWorker& w : registered) {
    const WorkerRegistration& c = *w.info;
    if (c.host != info.host || c.device_identity != info.device_identity ||
        (info.shares_device && c.shares_device)) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "worker (", info.host, " pid ", info.pid, ") refused: its ",
        info.device, " is ", info.device_identity, ", which worker ", w.name,
        " already uses; NCCL runs one rank "
        "per GPU: give each worker its own GPU, or start every worker "
        "that shares it with --collective gloo"));
  }
  return absl::OkStatus();
}

}  // namespace moe

// moe-worker's options: the flags' raw values (WorkerFlags, read in
// worker_main.cc, where the flags are defined), checked and resolved.
// (WorkerAgent's own options are WorkerOptions, in worker_agent.h.)
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "comm/collective.h"
#include "proto/credentials.h"

namespace moe {

// The flags as given. Defaults are the flags' defaults.
struct WorkerFlags {
  std::string router = "127.0.0.1:50051";
  std::string device = "cpu";
  int threads = 0;
  TlsFiles tls;
  std::string tls_server_name;
  std::string health_listen;
  std::string health_port_file;
  std::string metrics_listen;
  std::string metrics_port_file;
  std::string collective_host = "auto";
  std::string collective = "auto";
  std::string device_identity;  // empty: the device's own
  int64_t max_batch_tokens = 0;
  std::string worker_token_file;
};

// Checked options: the flags as given, --threads resolved in place (all
// cores when 0) and --collective parsed.
struct WorkerProcessOptions : WorkerFlags {
  Collective collective_kind = Collective::kAuto;

  // INVALID_ARGUMENT naming the first bad flag, the accepted values and the
  // value given. Reads no files (the --tls-* and --worker-token-file files are
  // read at start).
  static absl::StatusOr<WorkerProcessOptions> FromFlags(const WorkerFlags& f);
};

}  // namespace moe

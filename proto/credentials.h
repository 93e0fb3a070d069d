// gRPC credentials from PEM files: TLS for the public API, mutual TLS
// between router and workers, and the matching client side.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace moe {

struct TlsFiles {
  std::string cert;  // PEM certificate chain
  std::string key;   // PEM private key
  std::string ca;    // PEM roots: verify the peer against these
  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

// TLS with cert/key; with `require_client_cert`, peers must present a
// certificate signed by `ca` (mutual TLS). Insecure when `files` is empty.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, bool require_client_cert);

// TLS verifying the server against `ca` (the system roots when empty),
// presenting cert/key when given. Insecure when `files` is empty.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files);

// Bearer tokens, one per line (several allow rotation); blank lines and
// surrounding whitespace are ignored. At least one token is required.
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

}  // namespace moe

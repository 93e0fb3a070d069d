#include "proto/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace moe {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(what, " file ", path, ": cannot read"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file ", path, " is empty"));
  }
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, bool require_client_cert) {
  if (files.empty()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (require_client_cert && files.ca.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs a CA to verify client certificates");
  }
  MOE_ASSIGN_OR_RETURN(std::string cert,
                       ReadFile(files.cert, "TLS certificate"));
  MOE_ASSIGN_OR_RETURN(std::string key, ReadFile(files.key, "TLS key"));
  grpc::SslServerCredentialsOptions opts(
      require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (require_client_cert) {
    MOE_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadFile(files.ca, "TLS CA"));
  }
  opts.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files) {
  if (files.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  if (!files.ca.empty()) {
    MOE_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadFile(files.ca, "TLS CA"));
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and the other way round");
  }
  if (!files.cert.empty()) {
    MOE_ASSIGN_OR_RETURN(opts.pem_cert_chain,
                         ReadFile(files.cert, "TLS certificate"));
    MOE_ASSIGN_OR_RETURN(opts.pem_private_key, ReadFile(files.key, "TLS key"));
  }
  return grpc::SslCredentials(opts);
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(
    const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "auth token"));
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token file ", path, " holds no token"));
  }
  return tokens;
}

}  // namespace moe

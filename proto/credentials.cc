#include "proto/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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
  auto cert = ReadFile(files.cert, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(files.key, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions opts(
      require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (require_client_cert) {
    auto ca = ReadFile(files.ca, "TLS CA");
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  opts.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files) {
  if (files.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  if (!files.ca.empty()) {
    auto ca = ReadFile(files.ca, "TLS CA");
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and the other way round");
  }
  if (!files.cert.empty()) {
    auto cert = ReadFile(files.cert, "TLS certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(files.key, "TLS key");
    if (!key.ok()) return key.status();
    opts.pem_cert_chain = *cert;
    opts.pem_private_key = *key;
  }
  return grpc::SslCredentials(opts);
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(
    const std::string& path) {
  auto text = ReadFile(path, "auth token");
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
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

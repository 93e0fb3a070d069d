#include "proto/credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
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

// FAILED_PRECONDITION when the PEM private key is not the certificate's
// (gRPC would only fail later, as a port it cannot listen on).
absl::Status CheckKeyPair(const std::string& cert_pem,
                          const std::string& key_pem, const TlsFiles& files) {
  auto bio = [](const std::string& pem) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(
        BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  };
  auto cert_bio = bio(cert_pem);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS certificate file ", files.cert, " holds no PEM certificate"));
  }
  auto key_bio = bio(key_pem);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr),
      &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key file ", files.key, " holds no PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(
        absl::StrCat("TLS key ", files.key, " does not match certificate ",
                     files.cert, " (the key is not the certificate's)"));
  }
  return absl::OkStatus();
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
  MOE_RETURN_IF_ERROR(CheckKeyPair(cert, key, files));
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

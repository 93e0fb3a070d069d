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

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                &BIO_free);
}

// The first certificate of a PEM file; INVALID_ARGUMENT naming `flag`
// when it holds none.
absl::StatusOr<X509Ptr> FirstCertificate(const std::string& pem,
                                         const char* flag,
                                         const std::string& path) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr),
               &X509_free);
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file ", path, " holds no PEM certificate"));
  }
  return cert;
}

// FAILED_PRECONDITION when the PEM private key is not the certificate's.
// gRPC would only fail later: a server as a port it cannot listen on, a
// client on every connection attempt, with its own internal log lines.
absl::Status CheckKeyPair(const std::string& cert_pem,
                          const std::string& key_pem, const TlsFiles& files) {
  MOE_ASSIGN_OR_RETURN(X509Ptr cert,
                       FirstCertificate(cert_pem, "--tls-cert", files.cert));
  BioPtr key_bio = MemoryBio(key_pem);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr),
      &EVP_PKEY_free);
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key file ", files.key, " holds no PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::FailedPreconditionError(
        absl::StrCat("--tls-key ", files.key, " does not match --tls-cert ",
                     files.cert, " (the key is not the certificate's)"));
  }
  return absl::OkStatus();
}

// The CA's PEM, checked to hold a certificate: gRPC would take an empty
// trust list and refuse every peer, saying only that the handshake failed.
absl::StatusOr<std::string> ReadCa(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string pem, ReadFile(path, "--tls-ca"));
  MOE_RETURN_IF_ERROR(FirstCertificate(pem, "--tls-ca", path).status());
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, bool require_client_cert) {
  if (files.empty()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate (--tls-cert) and a key (--tls-key)");
  }
  if (require_client_cert && files.ca.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs a CA (--tls-ca) to verify client certificates");
  }
  MOE_ASSIGN_OR_RETURN(std::string cert, ReadFile(files.cert, "--tls-cert"));
  MOE_ASSIGN_OR_RETURN(std::string key, ReadFile(files.key, "--tls-key"));
  MOE_RETURN_IF_ERROR(CheckKeyPair(cert, key, files));
  grpc::SslServerCredentialsOptions opts(
      require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (require_client_cert) {
    MOE_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadCa(files.ca));
  }
  opts.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files) {
  if (files.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  if (!files.ca.empty()) {
    MOE_ASSIGN_OR_RETURN(opts.pem_root_certs, ReadCa(files.ca));
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate (--tls-cert) needs its key (--tls-key), and "
        "the other way round");
  }
  if (!files.cert.empty()) {
    MOE_ASSIGN_OR_RETURN(opts.pem_cert_chain,
                         ReadFile(files.cert, "--tls-cert"));
    MOE_ASSIGN_OR_RETURN(opts.pem_private_key,
                         ReadFile(files.key, "--tls-key"));
    // The same check as a server's: without it a worker with a key that is
    // not its certificate's starts, and retries forever with gRPC-internal
    // lines ("Invalid private key", "Handshaker factory creation failed").
    MOE_RETURN_IF_ERROR(
        CheckKeyPair(opts.pem_cert_chain, opts.pem_private_key, files));
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

// Throwaway PKI for TLS tests, made with the openssl command: a CA, a
// server certificate for localhost/127.0.0.1, a client certificate, and a
// second, untrusted CA with a client certificate of its own.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moe::testing {

struct TestCerts {
  std::string ca;  // trusted CA certificate
  std::string server_cert, server_key;
  std::string client_cert, client_key;  // signed by `ca`
  std::string rogue_ca;
  std::string rogue_cert, rogue_key;  // signed by `rogue_ca`
};

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

}  // namespace moe::testing

// Bearer-token check for the public API ("authorization: Bearer <token>";
// the scheme is case-insensitive, RFC 7235 section 2.1).
// Tokens are compared as SHA-256 digests with a constant-time compare, so
// neither the token's content nor its length leaks through timing.
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class TokenAuth {
 public:
  // With no tokens every call is allowed.
  explicit TokenAuth(const std::vector<std::string>& tokens);
  bool enabled() const { return !digests_.empty(); }
  // Returns OK, or UNAUTHENTICATED naming what was wrong.
  grpc::Status Check(const grpc::ServerContextBase& ctx) const;
  // Runs the same check on the `authorization` header's value (nullopt: the
  // header is absent).
  grpc::Status CheckHeader(std::optional<std::string_view> authorization) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

}  // namespace moe
